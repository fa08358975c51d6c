variable "cluster" {
  description = "spotfleet cluster name: the value of the spotfleet:cluster tag on everything this controller buys, and the prefix of every resource name here."
  type        = string

  validation {
    # Same rule as spotfleet.config.Config.cluster.
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,40}$", var.cluster))
    error_message = "cluster: lowercase letters, digits and '-', starting with a letter or digit, at most 41 characters."
  }
}

variable "spotfleet_version" {
  description = "spotfleet release installed with pip on the controller and on every worker (the workers' bootstrap installs the same version)."
  type        = string

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+([a-z0-9.+-]*)$", var.spotfleet_version))
    error_message = "spotfleet_version must be a release version such as 0.1.0."
  }
}

variable "vpc_id" {
  description = "VPC the controller and the workers run in."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "controller_subnet_id" {
  description = "Subnet of the controller instance (private; it needs a route to the AWS APIs and to PyPI, e.g. through a NAT gateway or VPC endpoints)."
  type        = string

  validation {
    condition     = can(regex("^subnet-[0-9a-f]{8,17}$", var.controller_subnet_id))
    error_message = "controller_subnet_id must look like subnet-0123456789abcdef0."
  }
}

variable "worker_subnets" {
  description = "Subnets workers may launch in, keyed by zone name (us-east-1a) or AZ id (use1-az1). Only these zones are offered (AwsProviderConfig.subnets)."
  type        = map(list(string))

  validation {
    condition     = length(var.worker_subnets) > 0 && alltrue([for ids in values(var.worker_subnets) : length(ids) > 0 && alltrue([for id in ids : can(regex("^subnet-[0-9a-f]{8,17}$", id))])])
    error_message = "worker_subnets needs at least one zone, each with at least one subnet id (subnet-...)."
  }
}

variable "worker_ami_id" {
  description = "AMI of the GPU workers: NVIDIA drivers and python3 (>= 3.11, with venv) installed, e.g. an AWS Deep Learning Base GPU AMI."
  type        = string

  validation {
    condition     = can(regex("^ami-[0-9a-f]{8,17}$", var.worker_ami_id))
    error_message = "worker_ami_id must look like ami-0123456789abcdef0."
  }
}

variable "worker_root_device_name" {
  description = "Root device name of worker_ami_id (/dev/sda1 for Ubuntu-based DLAMIs, /dev/xvda for Amazon Linux)."
  type        = string
  default     = "/dev/sda1"

  validation {
    condition     = can(regex("^/dev/(sda1|xvda|nvme0n1)$", var.worker_root_device_name))
    error_message = "worker_root_device_name must be /dev/sda1, /dev/xvda or /dev/nvme0n1."
  }
}

variable "worker_root_volume_gib" {
  description = "Size of the workers' encrypted gp3 root volume (datasets, checkpoints cache, containers)."
  type        = number
  default     = 200

  validation {
    condition     = var.worker_root_volume_gib >= 8 && var.worker_root_volume_gib <= 16384
    error_message = "worker_root_volume_gib must be between 8 and 16384."
  }
}

variable "worker_policy_arns" {
  description = "Extra managed policies for the worker role (e.g. read/write access to the checkpoint bucket). Workers need no AWS permission to run the agent."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for arn in var.worker_policy_arns : can(regex("^arn:aws[a-z-]*:iam::", arn))])
    error_message = "worker_policy_arns must be IAM policy ARNs."
  }
}

variable "controller_ami_id" {
  description = "AMI of the controller. null: the latest Amazon Linux 2023 (x86_64) from the public SSM parameter; its user data installs python3.11."
  type        = string
  default     = null

  validation {
    condition     = var.controller_ami_id == null || can(regex("^ami-[0-9a-f]{8,17}$", var.controller_ami_id))
    error_message = "controller_ami_id must be null or look like ami-0123456789abcdef0."
  }
}

variable "controller_instance_type" {
  description = "Instance type of the controller. It makes a few API calls per reconcile step and serves a small HTTP API: t3.small is plenty for hundreds of instances."
  type        = string
  default     = "t3.small"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.controller_instance_type))
    error_message = "controller_instance_type must be an EC2 instance type such as t3.small."
  }
}

variable "controller_volume_gib" {
  description = "Controller root volume (encrypted gp3): the OS, the job logs shipped by agents, and the SQLite store when no database is configured."
  type        = number
  default     = 20

  validation {
    condition     = var.controller_volume_gib >= 8 && var.controller_volume_gib <= 1024
    error_message = "controller_volume_gib must be between 8 and 1024."
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
  description = "CIDR blocks of users allowed to reach the controller API (spotfleet submit/jobs). Workers are always allowed through their security group."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.api_allowed_cidrs : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "api_allowed_cidrs must be CIDR blocks, and not 0.0.0.0/0 (put a load balancer or VPN in front instead)."
  }
}

variable "api_token_parameter" {
  description = "Name of an SSM Parameter Store SecureString holding the API bearer token (users send it; required because the API listens off loopback). Read by the controller at each start, never written to user data or state."
  type        = string

  validation {
    # SSM's rules: at most 1011 characters of a-z A-Z 0-9 _ . - /; a hierarchy
    # starts with "/"; the prefixes aws and ssm are reserved. (A regex repeat
    # such as {1,1011} would exceed RE2's limit of 1000 and never match.)
    condition = (
      length(var.api_token_parameter) <= 1011
      && can(regex("^(/[a-zA-Z0-9_.-]+)+$|^[a-zA-Z0-9_.-]+$", var.api_token_parameter))
      && !can(regex("^/?(?i:aws|ssm)", var.api_token_parameter))
    )
    error_message = "api_token_parameter must be an SSM parameter name: at most 1011 of a-z A-Z 0-9 _ . - /, a hierarchy starting with /, not starting with aws or ssm."
  }
}

variable "database_url_parameter" {
  description = "Name of an SSM Parameter Store SecureString holding the SQLAlchemy database URL (postgresql://...). null: SQLite on the controller's encrypted root volume."
  type        = string
  default     = null

  validation {
    # The same rules as api_token_parameter.
    condition = var.database_url_parameter == null || try(
      length(var.database_url_parameter) <= 1011
      && can(regex("^(/[a-zA-Z0-9_.-]+)+$|^[a-zA-Z0-9_.-]+$", var.database_url_parameter))
      && !can(regex("^/?(?i:aws|ssm)", var.database_url_parameter)),
      false
    )
    error_message = "database_url_parameter must be null or an SSM parameter name: at most 1011 of a-z A-Z 0-9 _ . - /, a hierarchy starting with /, not starting with aws or ssm."
  }
}

variable "database_egress" {
  description = "Where the controller may connect to its database (an RDS endpoint's subnets): CIDR blocks and port. Empty list: no database egress rule (SQLite)."
  type = object({
    cidr_blocks = list(string)
    port        = optional(number, 5432)
  })
  default = { cidr_blocks = [] }

  validation {
    condition     = alltrue([for c in var.database_egress.cidr_blocks : can(cidrhost(c, 0))])
    error_message = "database_egress.cidr_blocks must be CIDR blocks."
  }
}

variable "parameters_kms_key_arn" {
  description = "Customer managed KMS key that encrypts the SecureString parameters; null when they use the AWS managed key aws/ssm (which needs no extra grant)."
  type        = string
  default     = null

  validation {
    condition     = var.parameters_kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:", var.parameters_kms_key_arn))
    error_message = "parameters_kms_key_arn must be null or a KMS key ARN."
  }
}

variable "ebs_kms_key_arn" {
  description = "Customer managed KMS key for the controller's and the workers' EBS volumes; null: the account's default EBS key (aws/ebs). Volumes are encrypted either way."
  type        = string
  default     = null

  validation {
    condition     = var.ebs_kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:", var.ebs_kms_key_arn))
    error_message = "ebs_kms_key_arn must be null or a KMS key ARN."
  }
}

variable "sqs_kms_key_arn" {
  description = "Customer managed KMS key for the event queue; null: SQS-managed encryption (SSE-SQS). A customer key's policy must let events.amazonaws.com call kms:GenerateDataKey and kms:Decrypt, or EventBridge cannot deliver; the AWS managed key aws/sqs cannot be used at all."
  type        = string
  default     = null

  validation {
    condition     = var.sqs_kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:", var.sqs_kms_key_arn))
    error_message = "sqs_kms_key_arn must be null or a KMS key ARN."
  }
}

variable "enable_session_manager" {
  description = "Attach AmazonSSMManagedInstanceCore to the controller role so operators get a shell through SSM Session Manager (there is no SSH ingress)."
  type        = bool
  default     = false
}

variable "reconcile_interval" {
  description = "spotfleet reconcile.interval: how often the controller reconciles (it also reconciles at once on submissions and agent reports)."
  type        = string
  default     = "5s"

  validation {
    condition     = can(regex("^[0-9]+(ms|s|m|h)$", var.reconcile_interval))
    error_message = "reconcile_interval must be a duration such as 5s or 1m."
  }
}

variable "budget_per_hour" {
  description = "spotfleet budgets.global_per_hour: cap on the fleet's spend rate in USD/hour; null: no cap."
  type        = number
  default     = null

  validation {
    condition     = var.budget_per_hour == null || try(var.budget_per_hour > 0, false)
    error_message = "budget_per_hour must be null or positive."
  }
}

variable "tags" {
  description = "Tags on every resource this module creates and on every worker (AwsProviderConfig.extra_tags). Keys starting with spotfleet: or aws: are reserved."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.tags) : !startswith(k, "spotfleet:") && !startswith(k, "aws:")])
    error_message = "tags may not use the reserved prefixes spotfleet: and aws:."
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
