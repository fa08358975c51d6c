variable "project" {
  description = "GCP project id the controller buys in (GcpProviderConfig.project)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project))
    error_message = "project must be a project id: 6-30 lowercase letters, digits and '-', starting with a letter."
  }
}

variable "cluster" {
  description = "spotfleet cluster name: the value of the spotfleet-cluster label on everything this controller buys, and the prefix of every resource name here."
  type        = string

  validation {
    # spotfleet.config.Config.cluster's rule (also a valid label value), but at
    # most 24 characters: the longest name derived from it
    # (spotfleet-<cluster>-workers-deny-ingress) must fit GCP's 63.
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,23}$", var.cluster))
    error_message = "cluster: lowercase letters, digits and '-', starting with a letter or digit, at most 24 characters (GCP resource names are limited to 63)."
  }
}

variable "spotfleet_version" {
  description = "spotfleet release installed with pip on the controller and on every worker."
  type        = string

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+([a-z0-9.+-]*)$", var.spotfleet_version))
    error_message = "spotfleet_version must be a release version such as 0.1.0."
  }
}

variable "region" {
  description = "Region of the subnetwork, the controller and the workers."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a region name such as us-central1."
  }
}

variable "worker_zones" {
  description = "Zones workers may launch in (GcpProviderConfig.zones); all in region."
  type        = list(string)

  validation {
    condition     = length(var.worker_zones) > 0 && alltrue([for z in var.worker_zones : can(regex("^[a-z]+-[a-z]+[0-9]+-[a-z]$", z))])
    error_message = "worker_zones needs at least one zone name such as us-central1-a."
  }
}

variable "network" {
  description = "VPC network (self link or name) of the firewall rules."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([-a-z0-9]*[a-z0-9])?$", var.network)) || can(regex("projects/[^/]+/global/networks/[^/]+$", var.network))
    error_message = "network must be a network name or self link (projects/P/global/networks/N)."
  }
}

variable "subnetwork" {
  description = "Subnetwork self link (projects/P/regions/R/subnetworks/S) of the controller and the workers. It needs Private Google Access or Cloud NAT: nothing here gets an external address."
  type        = string

  validation {
    condition     = can(regex("^(https://www.googleapis.com/compute/v1/)?projects/[^/]+/regions/[^/]+/subnetworks/[^/]+$", var.subnetwork))
    error_message = "subnetwork must be a subnetwork self link: projects/PROJECT/regions/REGION/subnetworks/NAME."
  }
}

variable "worker_image" {
  description = "Boot image of the workers: NVIDIA drivers signed for Secure Boot and python3 (>= 3.11, with venv)."
  type        = string
  default     = "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accelerator-2204-amd64-with-nvidia-550"

  validation {
    condition     = can(regex("^(projects/[^/]+/global/images/|[a-z0-9-]+/)", var.worker_image))
    error_message = "worker_image must be an image path: projects/P/global/images/[family/]NAME or PROJECT/FAMILY."
  }
}

variable "worker_machine_type" {
  description = "Machine type recorded in the worker instance template. The controller picks the machine type per launch; this only matters when the template is used by hand."
  type        = string
  default     = "g2-standard-4"

  validation {
    condition     = can(regex("^[a-z][a-z0-9]*-[a-z0-9-]+$", var.worker_machine_type))
    error_message = "worker_machine_type must be a machine type such as e2-small or g2-standard-4."
  }
}

variable "worker_boot_disk_gb" {
  description = "Workers' boot disk size (pd-balanced)."
  type        = number
  default     = 200

  validation {
    condition     = var.worker_boot_disk_gb >= 10 && var.worker_boot_disk_gb <= 65536
    error_message = "worker_boot_disk_gb must be between 10 and 65536."
  }
}

variable "controller_zone" {
  description = "Zone of the controller VM."
  type        = string

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+-[a-z]$", var.controller_zone))
    error_message = "controller_zone must be a zone name such as us-central1-a."
  }
}

variable "controller_machine_type" {
  description = "Machine type of the controller VM; e2-small is plenty for hundreds of instances."
  type        = string
  default     = "e2-small"

  validation {
    condition     = can(regex("^[a-z][a-z0-9]*-[a-z0-9-]+$", var.controller_machine_type))
    error_message = "controller_machine_type must be a machine type such as e2-small or g2-standard-4."
  }
}

variable "controller_image" {
  description = "Boot image of the controller VM (Debian 12 ships python3.11)."
  type        = string
  default     = "debian-cloud/debian-12"

  validation {
    condition     = can(regex("^(projects/[^/]+/global/images/|[a-z0-9-]+/)", var.controller_image))
    error_message = "controller_image must be an image path: projects/P/global/images/[family/]NAME or PROJECT/FAMILY."
  }
}

variable "controller_disk_gb" {
  description = "Controller boot disk: the OS, job logs shipped by agents, and the SQLite store when no database is configured."
  type        = number
  default     = 20

  validation {
    condition     = var.controller_disk_gb >= 10 && var.controller_disk_gb <= 1024
    error_message = "controller_disk_gb must be between 10 and 1024."
  }
}

variable "api_port" {
  description = "TCP port of the controller's HTTP API (agents and users)."
  type        = number
  default     = 8478

  validation {
    condition     = var.api_port >= 1024 && var.api_port <= 65535 && floor(var.api_port) == var.api_port
    error_message = "api_port must be an integer between 1024 and 65535."
  }
}

variable "api_allowed_cidrs" {
  description = "CIDR ranges of users allowed to reach the controller API. Workers are always allowed (by service account)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.api_allowed_cidrs : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "api_allowed_cidrs must be CIDR ranges, and not 0.0.0.0/0."
  }
}

variable "api_token_secret" {
  description = "Secret Manager secret id (in project) holding the API bearer token; read by the controller at each start, never in metadata or state."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9_-]{1,255}$", var.api_token_secret))
    error_message = "api_token_secret must be a Secret Manager secret id."
  }
}

variable "database_url_secret" {
  description = "Secret Manager secret id holding the SQLAlchemy database URL; null: SQLite on the controller's boot disk."
  type        = string
  default     = null

  validation {
    condition     = var.database_url_secret == null || can(regex("^[a-zA-Z0-9_-]{1,255}$", var.database_url_secret))
    error_message = "database_url_secret must be null or a Secret Manager secret id."
  }
}

variable "disk_kms_key" {
  description = "Cloud KMS key self link for the controller's and the workers' boot disks (CMEK); null: Google-managed encryption (disks are encrypted either way)."
  type        = string
  default     = null

  validation {
    condition     = var.disk_kms_key == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.disk_kms_key))
    error_message = "disk_kms_key must be null or projects/P/locations/L/keyRings/R/cryptoKeys/K."
  }
}

variable "enable_iap_ssh" {
  description = "Allow SSH to the controller from Identity-Aware Proxy (35.235.240.0/20) for OS Login users."
  type        = bool
  default     = false
}

variable "reconcile_interval" {
  description = "spotfleet reconcile.interval."
  type        = string
  default     = "5s"

  validation {
    condition     = can(regex("^[0-9]+(ms|s|m|h)$", var.reconcile_interval))
    error_message = "reconcile_interval must be a duration such as 5s or 1m."
  }
}

variable "budget_per_hour" {
  description = "spotfleet budgets.global_per_hour (USD/hour); null: no cap."
  type        = number
  default     = null

  validation {
    condition     = var.budget_per_hour == null || try(var.budget_per_hour > 0, false)
    error_message = "budget_per_hour must be null or positive."
  }
}

variable "labels" {
  description = "Labels on every labelled resource here and on every worker (GcpProviderConfig.labels). Keys starting with spotfleet- are reserved."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([for k, v in var.labels :
      can(regex("^[a-z][a-z0-9_-]{0,62}$", k)) && !startswith(k, "spotfleet-") && can(regex("^[a-z0-9_-]{0,63}$", v))
    ])
    error_message = "labels: keys start with a lowercase letter, keys and values use lowercase letters, digits, '_' and '-' (at most 63), and spotfleet- keys are reserved."
  }
}

variable "bootstrap_template_path" {
  description = "Path of spotfleet's node bootstrap template. null: spotfleet/templates/agent-bootstrap.sh of the repository this module lives in, the same file the provider renders."
  type        = string
  default     = null

  validation {
    condition     = var.bootstrap_template_path == null || can(regex("\\.sh$", var.bootstrap_template_path))
    error_message = "bootstrap_template_path must be null or the path of agent-bootstrap.sh."
  }
}
