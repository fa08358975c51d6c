"""The AWS module: what the controller may do, how workers boot, where events go."""

from __future__ import annotations

import json
from typing import Any

from spotfleet.providers import aws_events
from spotfleet.providers.aws_config import AwsProviderConfig
from spotfleet.providers.aws_iam import REQUIRED_IAM_ACTIONS
from spotfleet.providers.base import TAG_CLUSTER
from tests.terraform.hcl import for_object_keys, module

AWS = module("aws")

# Resource types that take no tags; any other aws_* resource must be tagged.
UNTAGGABLE = {
    "aws_iam_role_policy",
    "aws_iam_role_policy_attachment",
    "aws_cloudwatch_event_target",
    "aws_sqs_queue_policy",
}
# Not provider calls: the controller reading its own secrets at start. Documented in the README.
BOOT_ACTIONS = {"ssm:GetParameter", "kms:Decrypt"}


def statements(document: str) -> list[dict[str, Any]]:
    body = AWS.resource("aws_iam_policy_document", document, kind="data").body
    found = list(body.get("statement", []))
    for dynamic in body.get("dynamic", []):
        if "statement" in dynamic:
            found += dynamic["statement"]["content"]
    return found


def actions_of(document: str) -> set[str]:
    return {a for s in statements(document) for a in s["actions"]}


def conditions(statement: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    return {c["variable"]: (c["test"], c["values"]) for c in statement.get("condition", [])}


def by_sid(document: str) -> dict[str, dict[str, Any]]:
    return {s["sid"]: s for s in statements(document)}


# --- IAM -------------------------------------------------------------------------------------


def test_provider_policy_grants_exactly_what_the_provider_declares() -> None:
    granted = actions_of("controller_provider")
    assert granted == set(REQUIRED_IAM_ACTIONS), (
        f"missing: {sorted(set(REQUIRED_IAM_ACTIONS) - granted)}; extra: {sorted(granted - set(REQUIRED_IAM_ACTIONS))}"
    )


def test_the_controller_role_has_only_the_provider_and_boot_policies() -> None:
    policies = {r.name: r.body for r in AWS.resources("aws_iam_role_policy")}
    assert {n: p["role"] for n, p in policies.items()} == {
        "controller_provider": "${aws_iam_role.controller.id}",
        "controller_boot": "${aws_iam_role.controller.id}",
    }
    assert policies["controller_provider"]["policy"] == "${data.aws_iam_policy_document.controller_provider.json}"
    assert actions_of("controller_boot") == BOOT_ACTIONS
    (attachment,) = [r for r in AWS.resources("aws_iam_role_policy_attachment") if "controller" in r.body["role"]]
    assert attachment.body["count"] == "${var.enable_session_manager ? 1 : 0}", "Session Manager is opt-in"


def test_wildcard_resources_only_for_actions_without_resource_level_permissions() -> None:
    read_only = {s for s in REQUIRED_IAM_ACTIONS if s.split(":")[1].startswith("Describe")} | {"pricing:GetProducts"}
    for statement in statements("controller_provider"):
        if "*" in statement["resources"]:
            assert set(statement["actions"]) <= read_only, statement["sid"]
            assert statement["resources"] == ["*"]


def test_instances_and_fleets_are_created_only_with_the_cluster_tag() -> None:
    cluster_tag = "aws:RequestTag/${local.cluster_tag_key}"
    for statement in statements("controller_provider"):
        creates = {"ec2:CreateFleet", "ec2:RunInstances"} & set(statement["actions"])
        touches_instances = any(r.endswith((":instance/*", ":fleet/*")) for r in statement["resources"])
        if creates and touches_instances:
            assert conditions(statement)[cluster_tag] == ("StringEquals", ["${var.cluster}"]), statement["sid"]
    assert AWS.locals["cluster_tag_key"] == TAG_CLUSTER


def test_terminate_and_template_edits_only_on_tagged_resources() -> None:
    resource_tag = "ec2:ResourceTag/${local.cluster_tag_key}"
    sids = by_sid("controller_provider")
    for statement in statements("controller_provider"):
        if {
            "ec2:TerminateInstances",
            "ec2:CreateLaunchTemplateVersion",
            "ec2:DeleteLaunchTemplateVersions",
            "ec2:DeletePlacementGroup",
        } & set(statement["actions"]):
            assert conditions(statement)[resource_tag] == ("StringEquals", ["${var.cluster}"]), statement["sid"]
    assert sids["TerminateOnlyTaggedInstances"]["resources"] == ["${local.arn_ec2}:instance/*"]


def test_tags_are_written_only_while_creating() -> None:
    (statement,) = [s for s in statements("controller_provider") if "ec2:CreateTags" in s["actions"]]
    assert statement["actions"] == ["ec2:CreateTags"]
    test, actions = conditions(statement)["ec2:CreateAction"]
    assert test == "StringEquals"
    assert set(actions) <= {"CreateFleet", "RunInstances", "CreateLaunchTemplate", "CreatePlacementGroup"}


def test_pass_role_only_for_the_worker_role_and_only_to_ec2() -> None:
    (statement,) = [s for s in statements("controller_provider") if "iam:PassRole" in s["actions"]]
    assert statement["actions"] == ["iam:PassRole"]
    assert statement["resources"] == ["${aws_iam_role.worker.arn}"]
    assert conditions(statement)["iam:PassedToService"] == ("StringEquals", ["ec2.amazonaws.com"])


def test_service_linked_roles_only_for_ec2_fleet_and_spot() -> None:
    (statement,) = [s for s in statements("controller_provider") if "iam:CreateServiceLinkedRole" in s["actions"]]
    _, services = conditions(statement)["iam:AWSServiceName"]
    assert set(services) == {"ec2fleet.amazonaws.com", "spot.amazonaws.com"}


def test_queue_access_only_to_the_event_queue() -> None:
    for statement in statements("controller_provider"):
        if any(a.startswith("sqs:") for a in statement["actions"]):
            assert statement["resources"] == ["${aws_sqs_queue.events.arn}"]


def test_boot_policy_reads_only_the_configured_parameters() -> None:
    (read,) = [s for s in statements("controller_boot") if s["actions"] == ["ssm:GetParameter"]]
    resources = read["resources"]
    assert "var.api_token_parameter" in resources and "var.database_url_parameter" in resources
    assert ":parameter/" in resources


# --- workers -----------------------------------------------------------------------------------


def test_imdsv2_required_with_hop_limit_one_everywhere() -> None:
    machines = AWS.resources("aws_launch_template") + AWS.resources("aws_instance")
    assert len(machines) == 2
    for r in machines:
        metadata = r.block("metadata_options")
        assert metadata["http_tokens"] == "required", r.address
        assert metadata["http_put_response_hop_limit"] == 1, r.address
        assert metadata["http_endpoint"] == "enabled", r.address


def test_every_ebs_volume_is_encrypted() -> None:
    template = AWS.resource("aws_launch_template", "worker")
    for mapping in template.body["block_device_mappings"]:
        assert mapping["ebs"][0]["encrypted"] is True
    root = AWS.resource("aws_instance", "controller").block("root_block_device")
    assert root["encrypted"] is True


def test_worker_template_matches_what_the_provider_enforces() -> None:
    template = AWS.resource("aws_launch_template", "worker").body
    assert template["instance_initiated_shutdown_behavior"] == "terminate"
    assert template["iam_instance_profile"][0]["arn"] == "${aws_iam_instance_profile.worker.arn}"
    assert template["vpc_security_group_ids"] == ["${aws_security_group.worker.id}"]
    # The controller may only add versions to a template carrying the cluster tag.
    assert AWS.resolve(template["tags"]) == AWS.locals["tags"]
    assert "local.cluster_tag_key" in AWS.locals["tags"]


def test_provider_config_keys_are_aws_provider_config_fields() -> None:
    keys = for_object_keys(AWS.locals["provider_config"])
    assert keys <= set(AwsProviderConfig.model_fields), keys - set(AwsProviderConfig.model_fields)
    assert {"launch_template_name", "sqs_queue_url", "subnets", "regions"} <= keys


# --- events ----------------------------------------------------------------------------------


def test_the_queue_receives_the_four_event_patterns_the_provider_reads() -> None:
    patterns = AWS.locals["event_patterns"]
    detail_types = {dt for p in patterns.values() for dt in p["detail-type"]}
    assert detail_types == {aws_events.SPOT_WARNING, aws_events.REBALANCE, aws_events.STATE_CHANGE, aws_events.HEALTH}
    by_type = {p["detail-type"][0]: p for p in patterns.values()}
    assert by_type[aws_events.HEALTH]["source"] == ["aws.health"]
    assert by_type[aws_events.HEALTH]["detail"]["eventTypeCategory"] == ["scheduledChange"]
    assert set(by_type[aws_events.STATE_CHANGE]["detail"]["state"]) == set(aws_events.GONE_STATES)
    for kind in (aws_events.SPOT_WARNING, aws_events.REBALANCE, aws_events.STATE_CHANGE):
        assert by_type[kind]["source"] == ["aws.ec2"]

    rule = AWS.resource("aws_cloudwatch_event_rule", "events").body
    assert rule["for_each"] == "${local.event_patterns}"
    assert rule["event_pattern"] == "${jsonencode(each.value)}"
    target = AWS.resource("aws_cloudwatch_event_target", "events").body
    assert target["for_each"] == "${aws_cloudwatch_event_rule.events}"
    assert target["arn"] == "${aws_sqs_queue.events.arn}"


def test_event_patterns_are_valid_eventbridge_json() -> None:
    for name, pattern in AWS.locals["event_patterns"].items():
        encoded = json.dumps(pattern)
        assert len(encoded) < 2048, name
        for key, values in pattern.items():
            assert isinstance(values, list | dict), f"{name}.{key}: EventBridge matches arrays"


def test_only_these_rules_may_send_to_the_queue() -> None:
    (allow,) = [s for s in statements("events_queue") if s.get("effect", "Allow") == "Allow"]
    assert allow["actions"] == ["sqs:SendMessage"]
    assert allow["principals"][0]["identifiers"] == ["events.amazonaws.com"]
    assert conditions(allow)["aws:SourceArn"] == (
        "ArnEquals",
        "${[for rule in aws_cloudwatch_event_rule.events : rule.arn]}",
    )
    policy = AWS.resource("aws_sqs_queue_policy", "events").body
    assert policy["queue_url"] == "${aws_sqs_queue.events.id}"


def test_queues_are_encrypted_with_or_without_a_customer_key() -> None:
    queues = AWS.resources("aws_sqs_queue")
    assert {q.name for q in queues} == {"events", "events_dlq"}
    for q in queues:
        # SSE-SQS unless a customer key is given; never neither.
        assert q.body["sqs_managed_sse_enabled"] == "${var.sqs_kms_key_arn == null ? true : null}", q.address
        assert q.body["kms_master_key_id"] == "${var.sqs_kms_key_arn}", q.address


# --- tags ------------------------------------------------------------------------------------


def test_every_taggable_resource_is_tagged() -> None:
    resources = AWS.resources()
    assert len(resources) > 20
    for r in resources:
        if r.type in UNTAGGABLE:
            continue
        assert r.body.get("tags"), f"{r.address} ({r.file.name}) is not tagged"
    for mapping in AWS.resource("aws_launch_template", "worker").body["tag_specifications"]:
        assert mapping["tags"] == "${local.tags}"


def test_the_controller_never_carries_the_cluster_tag() -> None:
    # It terminates instances with the cluster tag that it does not know: its own must not have it.
    controller_tags = AWS.locals["controller_tags"]
    assert "cluster_tag_key" not in controller_tags and TAG_CLUSTER not in controller_tags
    for r in (AWS.resource("aws_instance", "controller"), AWS.resource("aws_network_interface", "controller")):
        assert r.body["tags"] == "${local.controller_tags}", r.address
    root = AWS.resource("aws_instance", "controller").block("root_block_device")
    assert root["tags"] == "${local.controller_tags}"


# --- network ---------------------------------------------------------------------------------


def test_workers_reach_the_controller_on_the_api_port_only() -> None:
    ingress = {r.name: r.body for r in AWS.resources("aws_vpc_security_group_ingress_rule")}
    to_controller = {
        n: b for n, b in ingress.items() if b["security_group_id"] == "${aws_security_group.controller.id}"
    }
    assert set(to_controller) == {"controller_api_from_workers", "controller_api_from_users"}
    for body in to_controller.values():
        assert body["ip_protocol"] == "tcp"
        assert body["from_port"] == body["to_port"] == "${var.api_port}"
    assert to_controller["controller_api_from_workers"]["referenced_security_group_id"] == (
        "${aws_security_group.worker.id}"
    )
    to_workers = {n: b for n, b in ingress.items() if b["security_group_id"] == "${aws_security_group.worker.id}"}
    assert [b["referenced_security_group_id"] for b in to_workers.values()] == ["${aws_security_group.worker.id}"]
    for r in AWS.resources("aws_vpc_security_group_ingress_rule") + AWS.resources("aws_vpc_security_group_egress_rule"):
        assert r.body.get("cidr_ipv4") != "0.0.0.0/0" or r.body["from_port"] == 443, r.address
