terraform {
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # 6.12 or a later 6.x; `terraform init` records the one it picked in
      # .terraform.lock.hcl.
      version = "~> 6.12"
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region

  default_labels = {
    managed-by = "terraform"
  }
}
