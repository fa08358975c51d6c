output "spotfleet_config" {
  description = "The controller config this module runs with, without secrets: cluster, api (port, advertise_url), reconcile, budgets and providers.gcp. `spotfleet config from-terraform` turns `terraform output -json` into a config file from it."
  value       = local.spotfleet_config
}

output "controller_url" {
  description = "URL of the controller API inside the VPC (the agents' controller_url)."
  value       = local.controller_url
}

output "controller_instance" {
  description = "Self link of the controller VM."
  value       = google_compute_instance.controller.self_link
}

output "controller_service_account" {
  description = "Email of the controller's service account."
  value       = google_service_account.controller.email
}

output "worker_service_account" {
  description = "Email of the workers' service account; grant it checkpoint-bucket access."
  value       = google_service_account.worker.email
}

output "worker_instance_template" {
  description = "Self link of the worker instance template."
  value       = google_compute_instance_template.worker.self_link
}

output "controller_roles" {
  description = "Ids of the controller's two custom roles (compute on the project, actAs on the worker account)."
  value       = [google_project_iam_custom_role.controller_compute.id, google_project_iam_custom_role.controller_act_as.id]
}
