# A minimal root: one spotfleet cluster on existing networking.
# terraform init && terraform apply, then:
#   terraform output -json > outputs.json
#   spotfleet config from-terraform outputs.json -o spotfleet.yaml

module "spotfleet" {
  source = "../../modules/aws"

  cluster                = var.cluster
  spotfleet_version      = var.spotfleet_version
  vpc_id                 = var.vpc_id
  controller_subnet_id   = var.controller_subnet_id
  worker_subnets         = var.worker_subnets
  worker_ami_id          = var.worker_ami_id
  api_token_parameter    = var.api_token_parameter
  database_url_parameter = var.database_url_parameter
  api_allowed_cidrs      = var.api_allowed_cidrs
  enable_session_manager = true

  tags = {
    team = "ml-platform"
  }
}
