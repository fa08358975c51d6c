output "spotfleet_config" {
  description = "Controller config without secrets; input of `spotfleet config from-terraform`."
  value       = module.spotfleet.spotfleet_config
}

output "controller_url" {
  description = "URL of the controller API inside the VPC."
  value       = module.spotfleet.controller_url
}

output "worker_service_account" {
  description = "Workers' service account: grant it access to the checkpoint bucket."
  value       = module.spotfleet.worker_service_account
}
