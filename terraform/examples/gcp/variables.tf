variable "project" {
  description = "GCP project id (a project of its own for spotfleet is best: see the module README)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project))
    error_message = "project must be a project id."
  }
}

variable "region" {
  description = "Region of the cluster."
  type        = string
  default     = "us-central1"

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a region such as us-central1."
  }
}

variable "cluster" {
  description = "spotfleet cluster name."
  type        = string
  default     = "prod"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,23}$", var.cluster))
    error_message = "cluster: lowercase letters, digits and '-', at most 24 characters."
  }
}

variable "spotfleet_version" {
  description = "spotfleet release to install on the controller and the workers."
  type        = string
  default     = "0.1.0"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+", var.spotfleet_version))
    error_message = "spotfleet_version must be a release version such as 0.1.0."
  }
}

variable "network" {
  description = "VPC network name or self link."
  type        = string
  default     = "default"

  validation {
    condition     = length(var.network) > 0
    error_message = "network must not be empty."
  }
}

variable "subnetwork" {
  description = "Subnetwork self link, with Private Google Access or Cloud NAT."
  type        = string

  validation {
    condition     = can(regex("/subnetworks/", var.subnetwork))
    error_message = "subnetwork must be a subnetwork self link."
  }
}

variable "api_token_secret" {
  description = "Secret Manager secret id holding the API token (create it first: gcloud secrets create)."
  type        = string
  default     = "spotfleet-api-token"

  validation {
    condition     = length(var.api_token_secret) > 0
    error_message = "api_token_secret must not be empty."
  }
}
