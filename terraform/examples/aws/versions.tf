terraform {
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 5.80 or a later 5.x (validated and applied with 5.100.0); `terraform
      # init` records the one it picked in .terraform.lock.hcl.
      version = "~> 5.80"
    }
  }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = { ManagedBy = "terraform" }
  }
}
