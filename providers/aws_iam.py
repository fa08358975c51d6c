"""The IAM permissions the AWS provider needs, in one place.

``REQUIRED_IAM_ACTIONS`` is the contract with the terraform module's IAM policy
(a terraform test compares the two) and with operators who write their own.
``tests/providers/aws/test_aws_iam.py`` scans ``providers/aws*.py`` for boto3
client calls and fails when one maps to an action missing here.

Beyond the API calls the code makes directly, EC2 authorizes a fleet launch
against the actions it performs on the caller's behalf: ``ec2:RunInstances``
(CreateFleet launches through it), ``ec2:CreateTags`` (tag-on-create),
``iam:PassRole`` (the instance profile's role) and
``iam:CreateServiceLinkedRole`` (EC2 Fleet and Spot create their service-linked
roles on first use in an account).
"""

from __future__ import annotations

REQUIRED_IAM_ACTIONS: frozenset[str] = frozenset(
    {
        # offerings: instance types, zones, prices
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeAvailabilityZones",
        "ec2:DescribeSpotPriceHistory",
        "pricing:GetProducts",
        # launch: launch template, fleet
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:CreateLaunchTemplate",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:DeleteLaunchTemplateVersions",
        "ec2:CreateFleet",
        "ec2:RunInstances",
        "ec2:CreateTags",
        "iam:PassRole",
        "iam:CreateServiceLinkedRole",
        # gangs: cluster placement groups, EFA (subnet of a zone without a configured one)
        "ec2:CreatePlacementGroup",
        "ec2:DescribePlacementGroups",
        "ec2:DeletePlacementGroup",
        "ec2:DescribeSubnets",
        # list / get / terminate
        "ec2:DescribeInstances",
        "ec2:TerminateInstances",
        # events: EventBridge → SQS
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
    }
)

# API operations authorized under another action's name.
IAM_ACTION_FOR_OPERATION: dict[str, str] = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
}

# Actions EC2 checks on the caller's behalf during CreateFleet (no direct call).
IMPLIED_IAM_ACTIONS: frozenset[str] = frozenset(
    {
        "ec2:RunInstances",
        "ec2:CreateTags",
        "iam:PassRole",
        "iam:CreateServiceLinkedRole",
    }
)


def iam_action(service: str, operation: str) -> str:
    """The IAM action that authorizes one API operation (``ec2``, ``CreateFleet``)."""
    action = f"{service}:{operation}"
    return IAM_ACTION_FOR_OPERATION.get(action, action)
