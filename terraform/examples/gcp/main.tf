# A minimal root: one spotfleet cluster on an existing subnetwork.
# terraform init && terraform apply, then:
#   terraform output -json > outputs.json
#   spotfleet config from-terraform outputs.json -o spotfleet.yaml

module "spotfleet" {
  source = "../../modules/gcp"

  project           = var.project
  region            = var.region
  cluster           = var.cluster
  spotfleet_version = var.spotfleet_version
  network           = var.network
  subnetwork        = var.subnetwork
  worker_zones      = ["${var.region}-a", "${var.region}-b"]
  controller_zone   = "${var.region}-a"
  api_token_secret  = var.api_token_secret
  enable_iap_ssh    = true

  labels = {
    team = "ml-platform"
  }
}
