"""Launching through CreateFleet against moto: the exact request, idempotency, errors."""

from __future__ import annotations

import base64
from typing import Any

import boto3
import pytest
from aws_moto import (
    AMI,
    BOOT,
    CLUSTER,
    REGION,
    FleetShim,
    http_response,
    make_config,
    pick,
    request,
    tagged_instances,
)

from spotfleet.clock import FakeClock
from spotfleet.errors import InsufficientCapacity, PermanentError, QuotaExceeded, Throttled
from spotfleet.model.offering import Market
from spotfleet.providers.aws import AwsProvider, AwsProviderConfig
from spotfleet.providers.base import (
    TAG_CLUSTER,
    TAG_JOB_IDS,
    TAG_REQUEST_ID,
    CloudState,
)
from spotfleet.providers.bootstrap import render_bootstrap


def test_create_fleet_request_is_exactly_what_the_issue_asks(
    provider: AwsProvider, fleet: FleetShim, subnets: dict[str, str], ec2: Any
) -> None:
    g5 = pick(provider, "g5.xlarge")
    g5x2 = pick(provider, "g5.2xlarge")
    offerings = [*g5[:2], g5x2[0]]
    instances = provider.launch(request("req-exact", offerings, count=2))

    sent = fleet.last
    assert sent["Type"] == "instant"
    assert sent["ClientToken"] == "req-exact"
    [config] = sent["LaunchTemplateConfigs"]
    assert config["Overrides"] == [{"InstanceType": o.instance_type, "SubnetId": subnets[o.zone]} for o in offerings]
    assert sent["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 2,
        "DefaultTargetCapacityType": "spot",
        "SpotTargetCapacity": 2,
    }
    assert sent["SpotOptions"] == {"AllocationStrategy": "price-capacity-optimized"}
    by_type = {t["ResourceType"]: {x["Key"]: x["Value"] for x in t["Tags"]} for t in sent["TagSpecifications"]}
    assert by_type["instance"] == {
        TAG_CLUSTER: CLUSTER,
        TAG_REQUEST_ID: "req-exact",
        TAG_JOB_IDS: "job-1,job-2",
        "team": "ml-platform",
    }
    assert by_type["fleet"] == {TAG_CLUSTER: CLUSTER, TAG_REQUEST_ID: "req-exact"}

    assert len(instances) == 2
    assert {i.market for i in instances} == {Market.SPOT}
    assert all(i.tags[TAG_REQUEST_ID] == "req-exact" and i.state is CloudState.PENDING for i in instances)
    in_moto = tagged_instances(ec2, "req-exact")
    assert sorted(i["InstanceId"] for i in in_moto) == sorted(i.provider_id for i in instances)
    assert all(i.get("InstanceLifecycle") == "spot" for i in in_moto)


def test_launch_template_requires_imdsv2_encrypts_volumes_and_boots_the_agent(
    provider: AwsProvider, fleet: FleetShim, ec2: Any
) -> None:
    provider.launch(request("req-lt", pick(provider, "g5.xlarge")[:1]))
    spec = fleet.last["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
    [version] = ec2.describe_launch_template_versions(
        LaunchTemplateId=spec["LaunchTemplateId"], Versions=[spec["Version"]]
    )["LaunchTemplateVersions"]
    assert version["LaunchTemplateName"] == f"spotfleet-{CLUSTER}"
    data = version["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert data["ImageId"] == AMI
    assert all(b["Ebs"]["Encrypted"] for b in data["BlockDeviceMappings"])
    user_data = base64.b64decode(data["UserData"]).decode()
    assert user_data == render_bootstrap(BOOT, metadata_flavor="aws")
    assert "controller_url: http://controller.internal:8080" in user_data
    [volume_tags] = [t["Tags"] for t in data["TagSpecifications"] if t["ResourceType"] == "volume"]
    assert {TAG_CLUSTER: CLUSTER, TAG_REQUEST_ID: "req-lt"}.items() <= {
        t["Key"]: t["Value"] for t in volume_tags
    }.items()


def test_on_demand_uses_lowest_price(provider: AwsProvider, fleet: FleetShim, ec2: Any) -> None:
    instances = provider.launch(request("req-od", pick(provider, "g5.xlarge", Market.ON_DEMAND)[:2]))
    assert fleet.last["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert fleet.last["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert [i.market for i in instances] == [Market.ON_DEMAND]
    assert all("InstanceLifecycle" not in i for i in tagged_instances(ec2, "req-od"))


def test_relaunch_with_the_same_request_id_buys_nothing(
    provider: AwsProvider,
    fleet: FleetShim,
    ec2: Any,
    config: AwsProviderConfig,
    session: boto3.Session,
    clock: FakeClock,
) -> None:
    req = request("req-idem", pick(provider, "g5.xlarge")[:2], count=2)
    first = provider.launch(req)
    again = provider.launch(req)  # same process
    restarted = AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)
    after_restart = restarted.launch(req)  # a controller that crashed and came back
    ids = sorted(i.provider_id for i in first)
    assert sorted(i.provider_id for i in again) == ids
    assert sorted(i.provider_id for i in after_restart) == ids
    assert len(fleet.requests) == 1  # CreateFleet was called once
    assert len(tagged_instances(ec2, "req-idem")) == 2


def test_partial_fulfilment_returns_fewer_instances(provider: AwsProvider, fleet: FleetShim) -> None:
    a, b = pick(provider, "g5.xlarge")[:2]
    fleet.stocked_out = {(a.instance_type, a.zone): "InsufficientInstanceCapacity"}
    fleet.capacity_limit = 1
    instances = provider.launch(request("req-partial", [a, b], count=3))
    assert len(instances) == 1
    assert instances[0].zone == b.zone


def test_stockouts_name_exactly_the_offerings_without_capacity(provider: AwsProvider, fleet: FleetShim) -> None:
    a, b, c = pick(provider, "g5.xlarge")[:3]
    fleet.stocked_out = {
        (a.instance_type, a.zone): "InsufficientInstanceCapacity",
        (b.instance_type, b.zone): "UnfulfillableCapacity",
        (c.instance_type, c.zone): "InvalidFleetConfiguration",  # not a capacity problem
    }
    with pytest.raises(InsufficientCapacity) as caught:
        provider.launch(request("req-ice", [a, b, c]))
    assert sorted(o.key for o in caught.value.offerings) == sorted([a.key, b.key])
    assert "InvalidFleetConfiguration" in str(caught.value)  # the other error is not lost


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (500, "InsufficientInstanceCapacity", InsufficientCapacity),
        (400, "MaxSpotInstanceCountExceeded", InsufficientCapacity),
        (400, "SpotMaxPriceTooLow", InsufficientCapacity),
        (400, "VcpuLimitExceeded", QuotaExceeded),
        (400, "MaxFleetCountExceeded", QuotaExceeded),
        (403, "UnauthorizedOperation", PermanentError),
        (400, "InvalidParameterValue", PermanentError),
        (503, "RequestLimitExceeded", Throttled),
    ],
)
def test_whole_call_errors_become_typed_errors(
    provider: AwsProvider, fleet: FleetShim, status: int, code: str, expected: type[Exception]
) -> None:
    offerings = pick(provider, "g5.xlarge")[:2]
    fleet.next_error = (status, code, f"{code} message for the operator")
    with pytest.raises(expected) as caught:
        provider.launch(request(f"req-{code}", offerings))
    assert code in str(caught.value)  # the operator sees AWS's own code and message
    if isinstance(caught.value, InsufficientCapacity):
        assert {o.key for o in caught.value.offerings} == {o.key for o in offerings}


def test_per_override_quota_error_is_a_quota_error(provider: AwsProvider, fleet: FleetShim) -> None:
    [a] = pick(provider, "p5.48xlarge")[:1]
    fleet.stocked_out = {(a.instance_type, a.zone): "VcpuLimitExceeded"}
    with pytest.raises(QuotaExceeded):
        provider.launch(request("req-quota", [a]))


def test_throttled_create_fleet_is_retried_by_botocore(provider: AwsProvider, fleet: FleetShim) -> None:
    calls: list[int] = []

    def throttle_once(request: Any, **_: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            body = b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>x</RequestID></Response>"
            return http_response(503, body)
        return None

    provider.clients.ec2(REGION).meta.events.register_first("before-send.ec2.CreateFleet", throttle_once)
    instances = provider.launch(request("req-throttle", pick(provider, "g5.xlarge")[:1]))
    assert len(calls) == 2 and len(instances) == 1


def test_launch_without_an_image_is_a_permanent_error(
    moto: str, session: boto3.Session, clock: FakeClock, catalog_prices: Any, fleet: FleetShim
) -> None:
    provider = AwsProvider(make_config(moto, ami_id=None), cluster=CLUSTER, clock=clock, session=session)
    with pytest.raises(PermanentError, match="ami_id or launch_template_name"):
        provider.launch(request("req-noami", pick(provider, "g5.xlarge")[:1]))
    assert fleet.requests == []


def test_existing_launch_template_gets_a_derived_version(
    moto: str, session: boto3.Session, clock: FakeClock, catalog_prices: Any, fleet: FleetShim, ec2: Any
) -> None:
    template = ec2.create_launch_template(
        LaunchTemplateName="tf-gpu-workers",
        LaunchTemplateData={"ImageId": AMI, "InstanceType": "g5.xlarge"},
    )["LaunchTemplate"]
    config = make_config(moto, ami_id=None, launch_template_name="tf-gpu-workers")
    provider = AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)
    provider.launch(request("req-tf", pick(provider, "g5.xlarge")[:1]))
    spec = fleet.last["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
    assert spec == {"LaunchTemplateId": template["LaunchTemplateId"], "Version": "2"}
    versions = ec2.describe_launch_template_versions(LaunchTemplateName="tf-gpu-workers")["LaunchTemplateVersions"]
    derived = next(v for v in versions if v["VersionNumber"] == 2)["LaunchTemplateData"]
    assert derived["MetadataOptions"]["HttpTokens"] == "required"
    assert base64.b64decode(derived["UserData"]).decode().startswith("#!/bin/bash")
    assert next(v for v in versions if v["DefaultVersion"])["VersionNumber"] == 1  # default untouched

    missing = AwsProvider(
        make_config(moto, launch_template_name="nope-missing"), cluster=CLUSTER, clock=clock, session=session
    )
    with pytest.raises(PermanentError, match="nope-missing"):
        missing.launch(request("req-missing", pick(missing, "g5.xlarge")[:1]))


def test_idempotent_parameter_mismatch_adopts_the_first_fleet(
    provider: AwsProvider, fleet: FleetShim, config: AwsProviderConfig, session: boto3.Session, clock: FakeClock
) -> None:
    """A re-issued request (new agent token, so new user data) that AWS rejects as a replay."""
    req = request("req-replay", pick(provider, "g5.xlarge")[:1])
    [first] = provider.launch(req)
    restarted = AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)
    lagging = {"empty_answers": 2}  # DescribeInstances has not caught up yet

    def eventually_consistent(request: Any, **_: Any) -> Any:
        if lagging["empty_answers"] > 0:
            lagging["empty_answers"] -= 1
            body = b'<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>x</requestId><reservationSet/></DescribeInstancesResponse>'
            return http_response(200, body)
        return None

    restarted.clients.ec2(REGION).meta.events.register_first("before-send.ec2.DescribeInstances", eventually_consistent)
    fleet.next_error = (400, "IdempotentParameterMismatch", "token reused with different parameters")
    with pytest.raises(Throttled):  # not visible yet: retry next step, buy nothing
        restarted.launch(req)
    lagging["empty_answers"] = 1
    fleet.next_error = (400, "IdempotentParameterMismatch", "token reused with different parameters")
    assert [i.provider_id for i in restarted.launch(req)] == [first.provider_id]
    assert len(tagged_instances(restarted.clients.ec2(REGION), "req-replay")) == 1
