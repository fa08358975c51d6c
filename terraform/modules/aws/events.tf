# Cloud events: EventBridge rules deliver the four kinds of EC2 events the AWS
# provider reads (spotfleet/providers/aws_events.py) to one encrypted SQS queue.
# Only EventBridge, and only from these rules, may send to it.

locals {
  # Rule name suffix → its event pattern. Short keys keep spotfleet-<cluster>-<key>
  # within EventBridge's 64 characters for the longest cluster name (41).
  event_patterns = {
    spot = {
      source        = ["aws.ec2"]
      "detail-type" = ["EC2 Spot Instance Interruption Warning"]
    }
    rebalance = {
      source        = ["aws.ec2"]
      "detail-type" = ["EC2 Instance Rebalance Recommendation"]
    }
    state = {
      source        = ["aws.ec2"]
      "detail-type" = ["EC2 Instance State-change Notification"]
      # The provider acts on these two states only; the others would be noise.
      detail = { state = ["shutting-down", "terminated"] }
    }
    health = {
      source        = ["aws.health"]
      "detail-type" = ["AWS Health Event"]
      detail = {
        service           = ["EC2"]
        eventTypeCategory = ["scheduledChange"]
      }
    }
  }
}

resource "aws_sqs_queue" "events_dlq" {
  name                              = "${local.name}-events-dlq"
  message_retention_seconds         = 1209600
  sqs_managed_sse_enabled           = var.sqs_kms_key_arn == null ? true : null
  kms_master_key_id                 = var.sqs_kms_key_arn
  kms_data_key_reuse_period_seconds = var.sqs_kms_key_arn == null ? null : 300
  tags                              = local.tags
}

resource "aws_sqs_queue" "events" {
  name = "${local.name}-events"
  # A notice is worth acting on for minutes, not days.
  message_retention_seconds         = 3600
  visibility_timeout_seconds        = 30
  receive_wait_time_seconds         = 1
  sqs_managed_sse_enabled           = var.sqs_kms_key_arn == null ? true : null
  kms_master_key_id                 = var.sqs_kms_key_arn
  kms_data_key_reuse_period_seconds = var.sqs_kms_key_arn == null ? null : 300
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.events_dlq.arn
    maxReceiveCount     = 5
  })
  tags = local.tags
}

resource "aws_cloudwatch_event_rule" "events" {
  for_each      = local.event_patterns
  name          = "${local.name}-${each.key}"
  description   = "spotfleet ${var.cluster}: ${each.value["detail-type"][0]} to the event queue"
  event_pattern = jsonencode(each.value)
  tags          = local.tags
}

resource "aws_cloudwatch_event_target" "events" {
  for_each  = aws_cloudwatch_event_rule.events
  rule      = each.value.name
  target_id = "spotfleet-queue"
  arn       = aws_sqs_queue.events.arn
}

data "aws_iam_policy_document" "events_queue" {
  statement {
    sid       = "EventBridgeRulesOfThisCluster"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.events.arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [for rule in aws_cloudwatch_event_rule.events : rule.arn]
    }
  }

  statement {
    sid       = "DenyUnencryptedTransport"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [aws_sqs_queue.events.arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_sqs_queue_policy" "events" {
  queue_url = aws_sqs_queue.events.id
  policy    = data.aws_iam_policy_document.events_queue.json
}
