# IAM: the controller's role and its two policies, the workers' role and
# instance profile.
#
# The provider policy grants exactly spotfleet.providers.aws_iam.REQUIRED_IAM_ACTIONS
# (tests/terraform compares the two), scoped so the controller can only:
#   - create fleets and instances that carry spotfleet:cluster = <cluster>,
#   - tag resources only while creating them (so it cannot add the cluster tag
#     to someone else's instance and then terminate it),
#   - terminate instances and edit launch templates carrying that tag,
#   - pass only the worker role, and only to EC2,
#   - read and delete messages of its own queue.
# Describe*/pricing calls do not support resource-level permissions, hence "*".

locals {
  arn_ec2    = "arn:${local.partition}:ec2:${local.region}:${local.account_id}"
  arn_ec2_rg = "arn:${local.partition}:ec2:${local.region}::"
}

data "aws_iam_policy_document" "controller_assume" {
  statement {
    sid     = "Ec2AssumesTheControllerRole"
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

data "aws_iam_policy_document" "worker_assume" {
  statement {
    sid     = "Ec2AssumesTheWorkerRole"
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

data "aws_iam_policy_document" "controller_provider" {
  statement {
    sid = "ReadOnlyDiscovery"
    actions = [
      "ec2:DescribeAvailabilityZones",
      "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstances",
      "ec2:DescribeLaunchTemplateVersions",
      "ec2:DescribeLaunchTemplates",
      "ec2:DescribePlacementGroups",
      "ec2:DescribeSpotPriceHistory",
      "ec2:DescribeSubnets",
      "pricing:GetProducts",
    ]
    resources = ["*"]
  }

  statement {
    sid       = "CreateOnlyTaggedFleetsAndInstances"
    actions   = ["ec2:CreateFleet", "ec2:RunInstances"]
    resources = ["${local.arn_ec2}:fleet/*", "${local.arn_ec2}:instance/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/${local.cluster_tag_key}"
      values   = [var.cluster]
    }
  }

  statement {
    sid     = "LaunchUsingTheseResources"
    actions = ["ec2:CreateFleet", "ec2:RunInstances"]
    resources = [
      "${local.arn_ec2}:launch-template/*",
      "${local.arn_ec2}:network-interface/*",
      "${local.arn_ec2}:security-group/*",
      "${local.arn_ec2}:spot-instances-request/*",
      "${local.arn_ec2}:subnet/*",
      "${local.arn_ec2}:volume/*",
      "${local.arn_ec2}:key-pair/*",
      "${local.arn_ec2}:placement-group/*",
      "${local.arn_ec2_rg}image/*",
      "${local.arn_ec2_rg}snapshot/*",
    ]
  }

  statement {
    sid     = "TagOnlyWhileCreating"
    actions = ["ec2:CreateTags"]
    resources = [
      "${local.arn_ec2}:fleet/*",
      "${local.arn_ec2}:instance/*",
      "${local.arn_ec2}:volume/*",
      "${local.arn_ec2}:network-interface/*",
      "${local.arn_ec2}:launch-template/*",
      "${local.arn_ec2}:placement-group/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["CreateFleet", "RunInstances", "CreateLaunchTemplate", "CreatePlacementGroup"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/${local.cluster_tag_key}"
      values   = [var.cluster]
    }
  }

  statement {
    sid       = "CreateOnlyTaggedLaunchTemplates"
    actions   = ["ec2:CreateLaunchTemplate"]
    resources = ["${local.arn_ec2}:launch-template/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/${local.cluster_tag_key}"
      values   = [var.cluster]
    }
  }

  statement {
    sid       = "VersionOnlyTaggedLaunchTemplates"
    actions   = ["ec2:CreateLaunchTemplateVersion", "ec2:DeleteLaunchTemplateVersions"]
    resources = ["${local.arn_ec2}:launch-template/*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:ResourceTag/${local.cluster_tag_key}"
      values   = [var.cluster]
    }
  }

  statement {
    sid       = "CreateOnlyTaggedPlacementGroups"
    actions   = ["ec2:CreatePlacementGroup"]
    resources = ["${local.arn_ec2}:placement-group/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/${local.cluster_tag_key}"
      values   = [var.cluster]
    }
  }

  statement {
    sid       = "DeleteOnlyTaggedPlacementGroups"
    actions   = ["ec2:DeletePlacementGroup"]
    resources = ["${local.arn_ec2}:placement-group/*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:ResourceTag/${local.cluster_tag_key}"
      values   = [var.cluster]
    }
  }

  statement {
    sid       = "TerminateOnlyTaggedInstances"
    actions   = ["ec2:TerminateInstances"]
    resources = ["${local.arn_ec2}:instance/*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:ResourceTag/${local.cluster_tag_key}"
      values   = [var.cluster]
    }
  }

  statement {
    sid       = "PassOnlyTheWorkerRoleToEc2"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.worker.arn]
    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ec2.amazonaws.com"]
    }
  }

  statement {
    sid       = "Ec2FleetAndSpotServiceLinkedRoles"
    actions   = ["iam:CreateServiceLinkedRole"]
    resources = ["arn:${local.partition}:iam::${local.account_id}:role/aws-service-role/*"]
    condition {
      test     = "StringEquals"
      variable = "iam:AWSServiceName"
      values   = ["ec2fleet.amazonaws.com", "spot.amazonaws.com"]
    }
  }

  statement {
    sid       = "ConsumeTheEventQueue"
    actions   = ["sqs:DeleteMessage", "sqs:ReceiveMessage"]
    resources = [aws_sqs_queue.events.arn]
  }
}

# Not provider calls: what the controller's start-up needs to read its secrets.
# Documented in README.md ("IAM") and checked by tests/terraform.
data "aws_iam_policy_document" "controller_boot" {
  statement {
    sid     = "ReadSecretsAtStart"
    actions = ["ssm:GetParameter"]
    resources = [for name in compact([var.api_token_parameter, var.database_url_parameter]) :
    "arn:${local.partition}:ssm:${local.region}:${local.account_id}:parameter/${trimprefix(name, "/")}"]
  }

  dynamic "statement" {
    for_each = var.parameters_kms_key_arn == null ? [] : [var.parameters_kms_key_arn]
    content {
      sid       = "DecryptSecretsAtStart"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["ssm.${local.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role" "controller" {
  name                 = "${local.name}-controller"
  description          = "spotfleet controller for cluster ${var.cluster}: buys and terminates GPU workers"
  assume_role_policy   = data.aws_iam_policy_document.controller_assume.json
  max_session_duration = 3600
  tags                 = local.tags
}

resource "aws_iam_role_policy" "controller_provider" {
  name   = "spotfleet-provider"
  role   = aws_iam_role.controller.id
  policy = data.aws_iam_policy_document.controller_provider.json
}

resource "aws_iam_role_policy" "controller_boot" {
  name   = "spotfleet-controller-boot"
  role   = aws_iam_role.controller.id
  policy = data.aws_iam_policy_document.controller_boot.json
}

resource "aws_iam_role_policy_attachment" "controller_session_manager" {
  count      = var.enable_session_manager ? 1 : 0
  role       = aws_iam_role.controller.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "controller" {
  name = "${local.name}-controller"
  role = aws_iam_role.controller.name
  tags = local.tags
}

resource "aws_iam_role" "worker" {
  name                 = "${local.name}-worker"
  description          = "spotfleet GPU workers of cluster ${var.cluster}; the agent itself needs no AWS permission"
  assume_role_policy   = data.aws_iam_policy_document.worker_assume.json
  max_session_duration = 3600
  tags                 = local.tags
}

resource "aws_iam_role_policy_attachment" "worker_extra" {
  for_each   = toset(var.worker_policy_arns)
  role       = aws_iam_role.worker.name
  policy_arn = each.value
}

resource "aws_iam_instance_profile" "worker" {
  name = "${local.name}-worker"
  role = aws_iam_role.worker.name
  tags = local.tags
}
