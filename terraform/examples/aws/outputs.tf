output "spotfleet_config" {
  description = "Controller config without secrets; input of `spotfleet config from-terraform`."
  value       = module.spotfleet.spotfleet_config
}

output "controller_url" {
  description = "URL of the controller API inside the VPC."
  value       = module.spotfleet.controller_url
}

output "controller_instance_id" {
  description = "EC2 instance id of the controller (aws ssm start-session --target ...)."
  value       = module.spotfleet.controller_instance_id
}

output "worker_role_arn" {
  description = "Role of the workers: grant it access to the checkpoint bucket."
  value       = module.spotfleet.worker_role_arn
}
