# The workers' launch template. The controller launches every worker from it:
# for each launch the AWS provider adds a version copied from the default one
# with that launch's user data (the same bootstrap, carrying the instance's own
# agent token) and never changes the default version.
#
# The default version's user data is rendered here from the very template the
# provider renders (spotfleet/templates/agent-bootstrap.sh, same variable
# names). Its agent_token is empty, so an instance started from the default
# version by hand installs the agent but cannot join the cluster.

resource "aws_launch_template" "worker" {
  name                                 = "${local.name}-worker"
  description                          = "spotfleet GPU workers of cluster ${var.cluster}"
  image_id                             = var.worker_ami_id
  instance_initiated_shutdown_behavior = "terminate"
  ebs_optimized                        = true
  update_default_version               = true
  vpc_security_group_ids               = [aws_security_group.worker.id]

  user_data = base64encode(templatefile(local.bootstrap_template, {
    spotfleet_version = var.spotfleet_version
    controller_url    = local.controller_url
    agent_token       = ""
    cluster           = var.cluster
    metadata_flavor   = "aws"
    extra_env_lines   = ""
  }))

  iam_instance_profile {
    arn = aws_iam_instance_profile.worker.arn
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  block_device_mappings {
    device_name = var.worker_root_device_name
    ebs {
      volume_size           = var.worker_root_volume_gib
      volume_type           = "gp3"
      encrypted             = true
      kms_key_id            = var.ebs_kms_key_arn
      delete_on_termination = true
    }
  }

  monitoring {
    enabled = true
  }

  # Instances get their tags from the fleet request (cluster, request id,
  # instance id, job ids); volumes and network interfaces get them here.
  tag_specifications {
    resource_type = "volume"
    tags          = local.tags
  }

  tag_specifications {
    resource_type = "network-interface"
    tags          = local.tags
  }

  # Carries the cluster tag: the controller may only add versions to tagged templates.
  tags = local.tags
}
