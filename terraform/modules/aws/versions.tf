terraform {
  # optional() object attributes and the validation functions used here need 1.5+.
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # Any 5.x from 5.80 on (tested with 5.100.0); the exact version
      # is recorded in the root's .terraform.lock.hcl, not pinned here.
      version = "~> 5.80"
    }
  }
}
