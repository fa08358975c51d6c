# The controller: one small VM running `spotfleet up` under systemd. Its
# config is written from this module's variables (local.spotfleet_config);
# the API token and the database URL are read from Secret Manager each time
# the service starts, so they never appear in metadata or in state.

locals {
  # Not the cluster label: the controller deletes any instance labelled
  # spotfleet-cluster that its store does not know (a leak). Its own VM must
  # never look like a worker.
  controller_labels = merge(var.labels, { "spotfleet-controller" = var.cluster })

  controller_config = merge(local.spotfleet_config, {
    data_dir = "/var/lib/spotfleet"
    api      = merge(local.spotfleet_config.api, { host = "0.0.0.0" })
  })

  controller_startup = templatefile("${path.module}/templates/controller-startup.sh.tftpl", {
    # one unit: the repository's deploy/spotfleet.service, written as it is
    systemd_unit        = chomp(file("${path.module}/../../../deploy/spotfleet.service"))
    spotfleet_version   = var.spotfleet_version
    project             = var.project
    config_yaml         = yamlencode(local.controller_config)
    api_token_secret    = var.api_token_secret
    database_url_secret = var.database_url_secret == null ? "" : var.database_url_secret
  })
}

# A reserved internal address: known before the VM exists, stable across
# replacements, so workers always find the controller.
resource "google_compute_address" "controller" {
  project      = var.project
  name         = "${local.name}-controller"
  description  = "spotfleet controller ${var.cluster}"
  region       = var.region
  subnetwork   = var.subnetwork
  address_type = "INTERNAL"
  labels       = local.controller_labels
}

resource "google_compute_instance" "controller" {
  project                   = var.project
  name                      = "${local.name}-controller"
  description               = "spotfleet controller of cluster ${var.cluster}"
  zone                      = var.controller_zone
  machine_type              = var.controller_machine_type
  labels                    = local.controller_labels
  tags                      = [local.controller_network_tag]
  allow_stopping_for_update = true
  can_ip_forward            = false

  metadata = {
    block-project-ssh-keys = "TRUE"
    enable-oslogin         = "TRUE"
    serial-port-enable     = "FALSE"
    startup-script         = local.controller_startup
  }

  boot_disk {
    kms_key_self_link = var.disk_kms_key
    initialize_params {
      image  = var.controller_image
      size   = var.controller_disk_gb
      type   = "pd-balanced"
      labels = local.controller_labels
    }
  }

  # No access_config: no external address.
  network_interface {
    subnetwork = var.subnetwork
    network_ip = google_compute_address.controller.address
  }

  service_account {
    email  = google_service_account.controller.email
    scopes = ["cloud-platform"]
  }

  scheduling {
    provisioning_model  = "STANDARD"
    automatic_restart   = true
    on_host_maintenance = "MIGRATE"
  }

  shielded_instance_config {
    enable_secure_boot          = true
    enable_vtpm                 = true
    enable_integrity_monitoring = true
  }

  lifecycle {
    # A newer Debian image alone is no reason to replace the controller.
    ignore_changes = [boot_disk[0].initialize_params[0].image]
  }

  depends_on = [google_secret_manager_secret_iam_member.controller_reads]
}
