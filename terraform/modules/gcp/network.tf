# Firewall rules, by service account rather than network tag (a tag can be set
# by anyone who may edit an instance; a service account cannot be borrowed
# without actAs):
#   - the controller API from the workers and from api_allowed_cidrs only;
#   - workers of the cluster reach each other (gang jobs: NCCL);
#   - nothing else reaches a worker (this overrides allow-internal rules of a
#     default network);
#   - optionally SSH to the controller through IAP, for OS Login users.
# Egress stays open (PyPI, Google APIs through Private Google Access/NAT).

resource "google_compute_firewall" "controller_api_from_workers" {
  project                 = var.project
  name                    = "${local.name}-api-from-workers"
  description             = "spotfleet agents report to the controller API"
  network                 = var.network
  direction               = "INGRESS"
  priority                = 1000
  source_service_accounts = [google_service_account.worker.email]
  target_service_accounts = [google_service_account.controller.email]

  allow {
    protocol = "tcp"
    ports    = [tostring(var.api_port)]
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_firewall" "controller_api_from_users" {
  count                   = length(var.api_allowed_cidrs) > 0 ? 1 : 0
  project                 = var.project
  name                    = "${local.name}-api-from-users"
  description             = "spotfleet users reach the controller API"
  network                 = var.network
  direction               = "INGRESS"
  priority                = 1000
  source_ranges           = var.api_allowed_cidrs
  target_service_accounts = [google_service_account.controller.email]

  allow {
    protocol = "tcp"
    ports    = [tostring(var.api_port)]
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_firewall" "controller_ssh_from_iap" {
  count                   = var.enable_iap_ssh ? 1 : 0
  project                 = var.project
  name                    = "${local.name}-ssh-from-iap"
  description             = "SSH to the controller through Identity-Aware Proxy (OS Login)"
  network                 = var.network
  direction               = "INGRESS"
  priority                = 1000
  source_ranges           = ["35.235.240.0/20"]
  target_service_accounts = [google_service_account.controller.email]

  allow {
    protocol = "tcp"
    ports    = ["22"]
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_firewall" "workers_from_workers" {
  project                 = var.project
  name                    = "${local.name}-workers-from-workers"
  description             = "gang jobs: workers of this cluster talk to each other (NCCL, torch.distributed)"
  network                 = var.network
  direction               = "INGRESS"
  priority                = 900
  source_service_accounts = [google_service_account.worker.email]
  target_service_accounts = [google_service_account.worker.email]

  allow {
    protocol = "all"
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}

resource "google_compute_firewall" "workers_deny_ingress" {
  project                 = var.project
  name                    = "${local.name}-workers-deny-ingress"
  description             = "nothing else reaches a spotfleet worker"
  network                 = var.network
  direction               = "INGRESS"
  priority                = 1000
  source_ranges           = ["0.0.0.0/0"]
  target_service_accounts = [google_service_account.worker.email]

  deny {
    protocol = "all"
  }

  log_config {
    metadata = "INCLUDE_ALL_METADATA"
  }
}
