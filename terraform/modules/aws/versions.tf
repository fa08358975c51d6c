terraform {
  # optional() object attributes and the validation functions used here need 1.5+.
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # Modules state the range they are written against; the examples pin exactly.
      version = ">= 5.40.0, < 6.0.0"
    }
  }
}
