# IAM: a service account for the controller and one for the workers, and the
# controller's permissions as two custom roles whose union is exactly
# spotfleet.providers.gcp_permissions.REQUIRED_PERMISSIONS (tests/terraform
# compares them):
#   - spotfleet_<cluster>_compute, granted on the project: create, list, get
#     and delete instances, read machine and accelerator types, operations;
#   - spotfleet_<cluster>_actas = iam.serviceAccounts.actAs, granted on the
#     worker service account only, so the controller can start VMs as the
#     workers and as nothing else (granting it on the project would let it
#     run a VM as any service account in the project).
# GCP IAM cannot condition on instance labels: deleting only spotfleet's own
# instances rests on the provider's ownership check (NotOwned) and on running
# spotfleet in a project of its own.

locals {
  role_prefix = "spotfleet_${replace(var.cluster, "-", "_")}"

  controller_permissions = [
    "compute.acceleratorTypes.list",
    "compute.disks.create",
    "compute.images.useReadOnly",
    "compute.instances.create",
    "compute.instances.delete",
    "compute.instances.get",
    "compute.instances.list",
    "compute.instances.setLabels",
    "compute.instances.setMetadata",
    "compute.instances.setServiceAccount",
    "compute.instances.setTags",
    "compute.machineTypes.list",
    "compute.regionOperations.get",
    "compute.resourcePolicies.create",
    "compute.resourcePolicies.delete",
    "compute.resourcePolicies.get",
    "compute.resourcePolicies.list",
    "compute.resourcePolicies.use",
    "compute.subnetworks.use",
    "compute.subnetworks.useExternalIp",
    "compute.zoneOperations.get",
    "compute.zoneOperations.list",
  ]
}

resource "google_service_account" "controller" {
  project      = var.project
  account_id   = "sf-${substr(var.cluster, 0, 23)}-ctl" # 6-30 characters
  display_name = "spotfleet controller (${var.cluster})"
  description  = "Buys and deletes the GPU workers of spotfleet cluster ${var.cluster}"
}

resource "google_service_account" "worker" {
  project      = var.project
  account_id   = "sf-${substr(var.cluster, 0, 23)}-wrk" # 6-30 characters
  display_name = "spotfleet worker (${var.cluster})"
  description  = "GPU workers of spotfleet cluster ${var.cluster}; the agent needs no GCP permission"
}

resource "google_project_iam_custom_role" "controller_compute" {
  project     = var.project
  role_id     = "${local.role_prefix}_compute"
  title       = "spotfleet controller ${var.cluster}: compute"
  description = "What the spotfleet GCP provider calls (spotfleet.providers.gcp_permissions), less actAs"
  permissions = local.controller_permissions
}

resource "google_project_iam_custom_role" "controller_act_as" {
  project     = var.project
  role_id     = "${local.role_prefix}_actas"
  title       = "spotfleet controller ${var.cluster}: run VMs as the worker account"
  description = "iam.serviceAccounts.actAs, granted on the worker service account only"
  permissions = ["iam.serviceAccounts.actAs"]
}

resource "google_project_iam_member" "controller_compute" {
  project = var.project
  role    = google_project_iam_custom_role.controller_compute.id
  member  = "serviceAccount:${google_service_account.controller.email}"
}

resource "google_service_account_iam_member" "controller_acts_as_worker" {
  service_account_id = google_service_account.worker.name
  role               = google_project_iam_custom_role.controller_act_as.id
  member             = "serviceAccount:${google_service_account.controller.email}"
}

# Not provider calls: what the controller's start-up needs to read its secrets.
resource "google_secret_manager_secret_iam_member" "controller_reads" {
  for_each  = toset(compact([var.api_token_secret, var.database_url_secret]))
  project   = var.project
  secret_id = each.value
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.controller.email}"
}

# So the controller's and the workers' logs reach Cloud Logging.
resource "google_project_iam_member" "log_writer" {
  for_each = {
    controller = "serviceAccount:${google_service_account.controller.email}"
    worker     = "serviceAccount:${google_service_account.worker.email}"
  }
  project = var.project
  role    = "roles/logging.logWriter"
  member  = each.value
}
