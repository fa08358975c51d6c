output "spotfleet_config" {
  description = "The controller config this module runs with, without secrets: cluster, api (port, advertise_url), reconcile, budgets and providers.aws. `spotfleet config from-terraform` turns `terraform output -json` into a config file from it."
  value       = local.spotfleet_config
}

output "controller_url" {
  description = "URL of the controller API inside the VPC (the agents' controller_url)."
  value       = local.controller_url
}

output "controller_instance_id" {
  description = "EC2 instance id of the controller."
  value       = aws_instance.controller.id
}

output "controller_role_arn" {
  description = "IAM role of the controller (its policies: spotfleet-provider, spotfleet-controller-boot)."
  value       = aws_iam_role.controller.arn
}

output "worker_role_arn" {
  description = "IAM role of the workers; attach checkpoint-bucket access here or through worker_policy_arns."
  value       = aws_iam_role.worker.arn
}

output "worker_instance_profile_arn" {
  description = "Instance profile the workers launch with."
  value       = aws_iam_instance_profile.worker.arn
}

output "worker_launch_template_name" {
  description = "Launch template of the workers (providers.aws.launch_template_name)."
  value       = aws_launch_template.worker.name
}

output "worker_security_group_id" {
  description = "Security group of the workers."
  value       = aws_security_group.worker.id
}

output "controller_security_group_id" {
  description = "Security group of the controller."
  value       = aws_security_group.controller.id
}

output "event_queue_url" {
  description = "URL of the SQS queue EventBridge fills (providers.aws.sqs_queue_url)."
  value       = aws_sqs_queue.events.url
}

output "event_queue_arn" {
  description = "ARN of the event queue."
  value       = aws_sqs_queue.events.arn
}
