variable "region" {
  description = "AWS region of the cluster."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must be an AWS region such as us-east-1."
  }
}

variable "cluster" {
  description = "spotfleet cluster name."
  type        = string
  default     = "prod"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,40}$", var.cluster))
    error_message = "cluster: lowercase letters, digits and '-', at most 41 characters."
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

variable "vpc_id" {
  description = "VPC of the controller and the workers."
  type        = string

  validation {
    condition     = startswith(var.vpc_id, "vpc-")
    error_message = "vpc_id must start with vpc-."
  }
}

variable "controller_subnet_id" {
  description = "Private subnet of the controller (with a NAT gateway or VPC endpoints)."
  type        = string

  validation {
    condition     = startswith(var.controller_subnet_id, "subnet-")
    error_message = "controller_subnet_id must start with subnet-."
  }
}

variable "worker_subnets" {
  description = "Worker subnets by zone name or AZ id."
  type        = map(list(string))

  validation {
    condition     = length(var.worker_subnets) > 0
    error_message = "worker_subnets needs at least one zone."
  }
}

variable "worker_ami_id" {
  description = "GPU worker AMI (NVIDIA drivers, python3 >= 3.11)."
  type        = string

  validation {
    condition     = startswith(var.worker_ami_id, "ami-")
    error_message = "worker_ami_id must start with ami-."
  }
}

variable "api_token_parameter" {
  description = "SSM SecureString parameter holding the API token (create it first: aws ssm put-parameter --type SecureString)."
  type        = string
  default     = "/spotfleet/prod/api-token"

  validation {
    condition     = length(var.api_token_parameter) > 0
    error_message = "api_token_parameter must not be empty."
  }
}

variable "database_url_parameter" {
  description = "SSM SecureString parameter holding the database URL; null: SQLite on the controller."
  type        = string
  default     = null

  validation {
    condition     = var.database_url_parameter == null || try(length(var.database_url_parameter) > 0, false)
    error_message = "database_url_parameter must be null or a parameter name."
  }
}

variable "api_allowed_cidrs" {
  description = "Where users reach the API from (a VPN range)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.api_allowed_cidrs : can(cidrhost(c, 0))])
    error_message = "api_allowed_cidrs must be CIDR blocks."
  }
}
