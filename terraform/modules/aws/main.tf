# Shared values. Resources live in one file per concern: iam.tf, network.tf,
# events.tf, workers.tf, controller.tf.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  name       = "spotfleet-${var.cluster}"
  partition  = data.aws_partition.current.partition
  region     = data.aws_region.current.name
  account_id = data.aws_caller_identity.current.account_id

  # The ownership tag (spotfleet.providers.base.TAG_CLUSTER): the controller's
  # policy only lets it create, tag and terminate what carries it.
  cluster_tag_key = "spotfleet:cluster"
  tags            = merge(var.tags, { (local.cluster_tag_key) = var.cluster })

  # The one bootstrap template spotfleet.providers.bootstrap renders for every launch.
  bootstrap_template = coalesce(var.bootstrap_template_path, "${path.module}/../../../spotfleet/templates/agent-bootstrap.sh")

  controller_url = "http://${aws_network_interface.controller.private_ip}:${var.api_port}"

  # providers.aws of the controller config (AwsProviderConfig): workers launch
  # from this module's launch template, in these subnets, and events arrive on
  # this queue. Keys are AwsProviderConfig fields; nulls are dropped.
  provider_config = { for k, v in {
    regions              = [local.region]
    subnets              = var.worker_subnets
    launch_template_name = aws_launch_template.worker.name
    instance_profile     = aws_iam_instance_profile.worker.arn
    security_group_ids   = [aws_security_group.worker.id]
    root_volume_gib      = var.worker_root_volume_gib
    root_device_name     = var.worker_root_device_name
    kms_key_id           = var.ebs_kms_key_arn
    sqs_queue_url        = aws_sqs_queue.events.url
    extra_tags           = var.tags
  } : k => v if v != null }

  # The controller config, without secrets (the API token and the database URL
  # come from SSM at start). Output as spotfleet_config; the controller instance
  # adds api.host so it listens for the workers.
  spotfleet_config = {
    cluster = var.cluster
    api = {
      port          = var.api_port
      advertise_url = local.controller_url
    }
    reconcile = { interval = var.reconcile_interval }
    budgets   = { for k, v in { global_per_hour = var.budget_per_hour } : k => v if v != null }
    providers = { aws = local.provider_config }
  }
}
