# Shared values. Resources live in one file per concern: iam.tf, network.tf,
# workers.tf, controller.tf.

locals {
  name = "spotfleet-${var.cluster}"

  # The ownership label (spotfleet.providers.gcp_labels.LABEL_CLUSTER).
  cluster_label_key = "spotfleet-cluster"
  labels            = merge(var.labels, { (local.cluster_label_key) = var.cluster })

  # The one bootstrap template spotfleet.providers.bootstrap renders for every launch.
  bootstrap_template = coalesce(var.bootstrap_template_path, "${path.module}/../../../spotfleet/templates/agent-bootstrap.sh")

  worker_network_tag     = "${local.name}-worker"
  controller_network_tag = "${local.name}-controller"
  # The Compute API wants a path (global/networks/NAME), firewall rules take either.
  network_path   = can(regex("/", var.network)) ? var.network : "global/networks/${var.network}"
  controller_url = "http://${google_compute_address.controller.address}:${var.api_port}"

  # providers.gcp of the controller config (GcpProviderConfig): the same
  # shape as the worker instance template below.
  provider_config = { for k, v in {
    project            = var.project
    zones              = var.worker_zones
    network            = local.network_path
    subnetwork         = var.subnetwork
    external_ip        = false
    network_tags       = [local.worker_network_tag]
    service_account    = google_service_account.worker.email
    image              = var.worker_image
    boot_disk_gb       = var.worker_boot_disk_gb
    secure_boot        = true
    termination_action = "DELETE"
    labels             = var.labels
  } : k => v if v != null }

  # The controller config, without secrets (read from Secret Manager at start).
  spotfleet_config = {
    cluster = var.cluster
    api = {
      port          = var.api_port
      advertise_url = local.controller_url
    }
    reconcile = { interval = var.reconcile_interval }
    budgets   = { for k, v in { global_per_hour = var.budget_per_hour } : k => v if v != null }
    providers = { gcp = local.provider_config }
  }
}
