# Security groups: workers may reach the controller's API port and HTTPS
# (PyPI, the NVIDIA/CUDA repositories their jobs use, AWS APIs); nothing but
# other workers of the cluster may reach a worker (gang jobs: NCCL between
# nodes). The controller accepts the API port from the workers and
# from api_allowed_cidrs only, and reaches HTTPS (AWS APIs, PyPI) and its
# database. No SSH anywhere: use SSM Session Manager (enable_session_manager).

resource "aws_security_group" "controller" {
  name        = "${local.name}-controller"
  description = "spotfleet controller ${var.cluster}: API from workers and allowed users"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${local.name}-controller" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_security_group" "worker" {
  name        = "${local.name}-worker"
  description = "spotfleet workers ${var.cluster}: no ingress, egress to the controller API and HTTPS"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${local.name}-worker" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "controller_api_from_workers" {
  security_group_id            = aws_security_group.controller.id
  description                  = "spotfleet agents report to the controller API"
  ip_protocol                  = "tcp"
  from_port                    = var.api_port
  to_port                      = var.api_port
  referenced_security_group_id = aws_security_group.worker.id
  tags                         = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "controller_api_from_users" {
  for_each          = toset(var.api_allowed_cidrs)
  security_group_id = aws_security_group.controller.id
  description       = "spotfleet users reach the controller API"
  ip_protocol       = "tcp"
  from_port         = var.api_port
  to_port           = var.api_port
  cidr_ipv4         = each.value
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "controller_https" {
  security_group_id = aws_security_group.controller.id
  description       = "AWS APIs (EC2, SQS, SSM, Pricing) and PyPI"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "controller_database" {
  for_each          = toset(var.database_egress.cidr_blocks)
  security_group_id = aws_security_group.controller.id
  description       = "the controller's database"
  ip_protocol       = "tcp"
  from_port         = var.database_egress.port
  to_port           = var.database_egress.port
  cidr_ipv4         = each.value
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "worker_to_controller_api" {
  security_group_id            = aws_security_group.worker.id
  description                  = "spotfleet agent to the controller API"
  ip_protocol                  = "tcp"
  from_port                    = var.api_port
  to_port                      = var.api_port
  referenced_security_group_id = aws_security_group.controller.id
  tags                         = local.tags
}

resource "aws_vpc_security_group_egress_rule" "worker_https" {
  security_group_id = aws_security_group.worker.id
  description       = "PyPI (spotfleet install), package and dataset downloads, AWS APIs"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "worker_from_workers" {
  security_group_id            = aws_security_group.worker.id
  description                  = "gang jobs: workers of this cluster talk to each other (NCCL, torch.distributed)"
  ip_protocol                  = "-1"
  referenced_security_group_id = aws_security_group.worker.id
  tags                         = local.tags
}

resource "aws_vpc_security_group_egress_rule" "worker_to_workers" {
  security_group_id            = aws_security_group.worker.id
  description                  = "gang jobs: workers of this cluster talk to each other (NCCL, torch.distributed)"
  ip_protocol                  = "-1"
  referenced_security_group_id = aws_security_group.worker.id
  tags                         = local.tags
}
