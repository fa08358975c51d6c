"""EventBridge → SQS → poll_events() round trip through moto's EventBridge and SQS."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_moto import CLUSTER, REGION, RULE_PATTERN, http_response, make_config, pick, request, run_foreign

from spotfleet.clock import FakeClock
from spotfleet.errors import Throttled
from spotfleet.model.events import NoticeKind
from spotfleet.providers.aws import AwsProvider
from spotfleet.providers.aws_events import (
    HEALTH,
    REBALANCE,
    SPOT_WARNING,
    STATE_CHANGE,
    parse_message,
)


@pytest.fixture
def queue(moto: str, session: boto3.Session) -> str:
    """An SQS queue fed by an EventBridge rule, as the terraform module sets it up."""
    sqs = session.client("sqs", endpoint_url=moto)
    url = str(sqs.create_queue(QueueName="spotfleet-events", Attributes={"VisibilityTimeout": "0"})["QueueUrl"])
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = session.client("events", endpoint_url=moto)
    events.put_rule(Name="spotfleet-ec2", EventPattern=json.dumps(RULE_PATTERN))
    events.put_targets(Rule="spotfleet-ec2", Targets=[{"Id": "sqs", "Arn": arn}])
    return url


@pytest.fixture
def events_provider(
    moto: str,
    queue: str,
    session: boto3.Session,
    clock: FakeClock,
    subnets: dict[str, str],
    catalog_prices: Any,
    fleet: Any,
) -> AwsProvider:
    zone = sorted(subnets)[0]
    config = make_config(moto, subnets={zone: [subnets[zone]]}, sqs_queue_url=queue)
    return AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)


def put(
    session: boto3.Session,
    moto: str,
    detail_type: str,
    detail: dict[str, Any],
    *,
    source: str = "aws.ec2",
    resources: list[str] | None = None,
) -> None:
    events = session.client("events", endpoint_url=moto)
    result = events.put_events(
        Entries=[
            {"Source": source, "DetailType": detail_type, "Detail": json.dumps(detail), "Resources": resources or []}
        ]
    )
    assert result["FailedEntryCount"] == 0


def queue_depth(session: boto3.Session, moto: str, url: str) -> int:
    attrs = session.client("sqs", endpoint_url=moto).get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_eventbridge_events_round_trip_to_instance_events(
    events_provider: AwsProvider, session: boto3.Session, moto: str, queue: str, ec2: Any
) -> None:
    provider = events_provider
    [own] = provider.launch(request("req-ev", pick(provider, "g5.xlarge")[:1]))
    foreign = run_foreign(ec2)
    iid = own.provider_id
    put(session, moto, SPOT_WARNING, {"instance-id": iid, "instance-action": "terminate"})
    put(session, moto, SPOT_WARNING, {"instance-id": foreign, "instance-action": "terminate"})  # not ours
    put(session, moto, REBALANCE, {"instance-id": iid})
    put(session, moto, STATE_CHANGE, {"instance-id": iid, "state": "running"})  # irrelevant
    put(session, moto, STATE_CHANGE, {"instance-id": iid, "state": "shutting-down"})
    put(
        session,
        moto,
        HEALTH,
        {
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "service": "EC2",
            "startTime": "Mon, 09 Mar 2026 01:00:00 GMT",
            "affectedEntities": [{"entityValue": iid}],
        },
        source="aws.health",
    )
    sqs = session.client("sqs", endpoint_url=moto)
    sqs.send_message(QueueUrl=queue, MessageBody="this is not an event")  # poison: dropped, deleted

    events = provider.poll_events()
    by_kind = {e.kind: e for e in events}
    assert sorted(by_kind) == sorted(
        [NoticeKind.SPOT_INTERRUPTION, NoticeKind.REBALANCE, NoticeKind.TERMINATED, NoticeKind.MAINTENANCE]
    )
    assert {e.provider_instance_id for e in events} == {iid}  # the foreign instance's warning is dropped
    warning = by_kind[NoticeKind.SPOT_INTERRUPTION]
    assert warning.deadline == warning.observed_at + timedelta(minutes=2)
    assert warning.source == "eventbridge" and warning.provider == "aws"
    assert by_kind[NoticeKind.MAINTENANCE].deadline == datetime(2026, 3, 9, 1, 0, tzinfo=UTC)
    assert queue_depth(session, moto, queue) == 0  # every handled message was deleted
    assert provider.poll_events() == []


def test_duplicate_deliveries_are_returned_once(
    events_provider: AwsProvider, session: boto3.Session, moto: str, queue: str
) -> None:
    [own] = events_provider.launch(request("req-dup", pick(events_provider, "g5.xlarge")[:1]))
    body = json.dumps(
        {
            "version": "0",
            "id": "7e0f0b2d-dup",
            "detail-type": SPOT_WARNING,
            "source": "aws.ec2",
            "account": "123456789012",
            "time": "2026-03-02T12:00:00Z",
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{own.provider_id}"],
            "detail": {"instance-id": own.provider_id, "instance-action": "terminate"},
        }
    )
    sqs = session.client("sqs", endpoint_url=moto)
    sqs.send_message(QueueUrl=queue, MessageBody=body)
    sqs.send_message(QueueUrl=queue, MessageBody=body)
    first = events_provider.poll_events()
    sqs.send_message(QueueUrl=queue, MessageBody=body)  # redelivered later
    assert len(first) == 1 and events_provider.poll_events() == []
    assert queue_depth(session, moto, queue) == 0


def test_messages_stay_queued_when_ownership_cannot_be_checked(
    events_provider: AwsProvider, session: boto3.Session, moto: str, queue: str, ec2: Any
) -> None:
    """A message is deleted only after it was handled; a throttled check leaves it for later."""
    stranger = run_foreign(ec2, tags={"spotfleet:cluster": CLUSTER})  # ours, but this process never saw it
    put(session, moto, SPOT_WARNING, {"instance-id": stranger, "instance-action": "terminate"})
    failing = {"on": True}

    def throttle(request: Any, **_: Any) -> Any:
        if failing["on"]:
            body = b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>slow down</Message></Error></Errors><RequestID>x</RequestID></Response>"
            return http_response(503, body)
        return None

    events_provider.clients.ec2(REGION).meta.events.register_first("before-send.ec2.DescribeInstances", throttle)
    with pytest.raises(Throttled):
        events_provider.poll_events()
    assert queue_depth(session, moto, queue) == 1
    failing["on"] = False
    [event] = events_provider.poll_events()
    assert (event.provider_instance_id, event.kind) == (stranger, NoticeKind.SPOT_INTERRUPTION)
    assert queue_depth(session, moto, queue) == 0


def test_parse_sns_wrapped_and_ignored_events() -> None:
    inner = {
        "id": "e1",
        "detail-type": REBALANCE,
        "source": "aws.ec2",
        "time": "2026-03-02T12:00:00Z",
        "region": REGION,
        "detail": {"instance-id": "i-1"},
    }
    [notice] = parse_message(json.dumps({"Type": "Notification", "Message": json.dumps(inner)}))
    assert (notice.instance_id, notice.kind) == ("i-1", NoticeKind.REBALANCE)
    assert parse_message(json.dumps({**inner, "detail-type": "EC2 AMI State Change"})) == []
    health = {**inner, "detail-type": HEALTH, "source": "aws.health", "detail": {"eventTypeCategory": "issue"}}
    assert parse_message(json.dumps(health)) == []
    with pytest.raises((ValueError, KeyError)):
        parse_message(json.dumps({"hello": "world"}))


def test_no_queue_configured_means_no_events(provider: AwsProvider) -> None:
    assert provider.poll_events() == []


def test_exact_api_calls_for_one_launch_and_one_interruption(
    moto: str,
    queue: str,
    session: boto3.Session,
    clock: FakeClock,
    subnets: dict[str, str],
    catalog_prices: Any,
    fleet: Any,
) -> None:
    """The calls docs/aws.md lists; a change here is a change to the IAM story and the docs."""
    calls: list[str] = []

    def record(model: Any, **_: Any) -> None:
        calls.append(f"{model.service_model.service_name}:{model.name}")

    session.events.register("before-call", record)
    zone = sorted(subnets)[0]
    config = make_config(moto, subnets={zone: [subnets[zone]]}, sqs_queue_url=queue)
    provider = AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)
    offerings = pick(provider, "g5.xlarge")[:1]
    calls.clear()
    [own] = provider.launch(request("req-calls", offerings))
    assert calls == [
        "ec2:DescribeInstances",  # adopt what this request id already launched
        "ec2:DescribeLaunchTemplates",
        "ec2:CreateLaunchTemplate",  # first launch in the region only
        "ec2:CreateLaunchTemplateVersion",
        "ec2:CreateFleet",
    ]
    calls.clear()
    put(session, moto, SPOT_WARNING, {"instance-id": own.provider_id, "instance-action": "terminate"})
    calls.clear()
    [event] = provider.poll_events()
    assert event.kind is NoticeKind.SPOT_INTERRUPTION
    assert calls == ["sqs:ReceiveMessage", "sqs:DeleteMessageBatch", "sqs:ReceiveMessage"]
