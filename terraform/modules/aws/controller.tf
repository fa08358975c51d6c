# The controller: one small EC2 instance running `spotfleet up` under systemd.
# Its config is written from this module's variables (local.spotfleet_config);
# the API token and the database URL are read from SSM Parameter Store each
# time the service starts, so they never appear in user data or in state.

data "aws_ssm_parameter" "al2023" {
  count = var.controller_ami_id == null ? 1 : 0
  name  = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
}

locals {
  # Not the cluster tag: the controller terminates any instance carrying
  # spotfleet:cluster that its store does not know (a leak), and its policy
  # allows exactly that. Its own instance must never look like a worker.
  controller_tags = merge(var.tags, { "spotfleet:controller" = var.cluster, Name = "${local.name}-controller" })

  controller_ami = var.controller_ami_id != null ? var.controller_ami_id : nonsensitive(data.aws_ssm_parameter.al2023[0].value)

  # What the controller instance runs with: the shared config plus where to
  # listen and keep its data.
  controller_config = merge(local.spotfleet_config, {
    data_dir = "/var/lib/spotfleet"
    api      = merge(local.spotfleet_config.api, { host = "0.0.0.0" })
  })

  controller_user_data = templatefile("${path.module}/templates/controller-user-data.sh.tftpl", {
    # one unit: the repository's deploy/spotfleet.service, written as it is
    systemd_unit           = chomp(file("${path.module}/../../../deploy/spotfleet.service"))
    spotfleet_version      = var.spotfleet_version
    region                 = local.region
    config_yaml            = yamlencode(local.controller_config)
    api_token_parameter    = var.api_token_parameter
    database_url_parameter = var.database_url_parameter == null ? "" : var.database_url_parameter
  })
}

# A separate network interface gives the controller a private address known
# before the instance exists: the workers' bootstrap and the config need it.
resource "aws_network_interface" "controller" {
  subnet_id       = var.controller_subnet_id
  security_groups = [aws_security_group.controller.id]
  description     = "spotfleet controller ${var.cluster}"
  tags            = local.controller_tags
}

resource "aws_instance" "controller" {
  ami                  = local.controller_ami
  instance_type        = var.controller_instance_type
  iam_instance_profile = aws_iam_instance_profile.controller.name
  ebs_optimized        = true
  monitoring           = true
  user_data_base64     = base64gzip(local.controller_user_data)

  # A new config means a new user data; replace the instance rather than
  # leaving it on the old one (state lives in the database or is rebuilt by
  # adopting tagged instances).
  user_data_replace_on_change = true

  network_interface {
    network_interface_id = aws_network_interface.controller.id
    device_index         = 0
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.controller_volume_gib
    encrypted             = true
    kms_key_id            = var.ebs_kms_key_arn
    delete_on_termination = true
    tags                  = local.controller_tags
  }

  tags = local.controller_tags

  lifecycle {
    # A newer Amazon Linux image alone is no reason to replace the controller.
    ignore_changes = [ami]
  }
}
