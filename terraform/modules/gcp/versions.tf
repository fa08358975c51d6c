terraform {
  # optional() object attributes and the validation functions used here need 1.5+.
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # Modules state the range they are written against; the examples pin exactly.
      version = ">= 5.0.0, < 7.0.0"
    }
  }
}
