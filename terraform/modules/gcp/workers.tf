# The worker instance template: what every spotfleet worker of this cluster
# looks like. The GCP provider builds each instance from the same settings
# (local.provider_config becomes providers.gcp in the controller config:
# image, disk, service account, subnetwork, network tag, labels, Shielded VM,
# termination action) and adds the per-launch parts: machine type,
# accelerators, market, ownership labels and the bootstrap carrying the
# instance's own agent token. The template is the reviewed reference and what
# an operator uses to start a worker by hand.
#
# Its startup script is rendered from the very template the provider renders
# (spotfleet/templates/agent-bootstrap.sh, same variable names), with an empty
# agent token: a VM started from this template by hand installs the agent but
# cannot join the cluster until it gets a token.

resource "google_compute_instance_template" "worker" {
  project      = var.project
  name_prefix  = "${local.name}-worker-"
  description  = "spotfleet GPU workers of cluster ${var.cluster}"
  machine_type = var.worker_machine_type
  region       = var.region
  labels       = local.labels
  tags         = [local.worker_network_tag]

  metadata = {
    block-project-ssh-keys = "TRUE"
    enable-oslogin         = "TRUE"
    serial-port-enable     = "FALSE"
    startup-script = templatefile(local.bootstrap_template, {
      spotfleet_version = var.spotfleet_version
      controller_url    = local.controller_url
      agent_token       = ""
      cluster           = var.cluster
      metadata_flavor   = "gcp"
      extra_env_lines   = ""
    })
  }

  disk {
    boot         = true
    auto_delete  = true
    source_image = var.worker_image
    disk_type    = "pd-balanced"
    disk_size_gb = var.worker_boot_disk_gb
    labels       = local.labels

    dynamic "disk_encryption_key" {
      for_each = var.disk_kms_key == null ? [] : [var.disk_kms_key]
      content {
        kms_key_self_link = disk_encryption_key.value
      }
    }
  }

  # No access_config: no external address.
  network_interface {
    subnetwork = var.subnetwork
  }

  service_account {
    email  = google_service_account.worker.email
    scopes = ["cloud-platform"]
  }

  scheduling {
    provisioning_model          = "SPOT"
    preemptible                 = true
    automatic_restart           = false
    on_host_maintenance         = "TERMINATE"
    instance_termination_action = "DELETE"
  }

  shielded_instance_config {
    enable_secure_boot          = true
    enable_vtpm                 = true
    enable_integrity_monitoring = true
  }

  lifecycle {
    create_before_destroy = true
  }
}
