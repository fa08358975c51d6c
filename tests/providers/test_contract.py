"""One contract, five providers: what the controller relies on, checked on each.

``providers/base.py`` states the Protocol's contracts. Each adapter has its own
tests of how it talks to its cloud; this suite checks the *same* promises on
all of them, so a new provider (or a change to one) cannot quietly weaken one:

- ``launch`` is idempotent per request id (a re-issued launch buys nothing);
- ``list_instances`` returns this cluster's instances and nobody else's;
- ``terminate`` refuses an instance it does not own and leaves it running; an
  unknown id is ``InstanceNotFound``; terminating twice is a no-op;
- a launch the cloud cannot serve raises a *typed* ``ProviderError``
  (``InsufficientCapacity`` / ``QuotaExceeded``) and buys nothing;
- ``poll_events`` returns ``InstanceEvent``s of this provider, and a reclaim of
  an instance shows up there for that instance.

The providers: ``fake`` (in memory), ``local`` (real processes), ``sim`` (a
replayed trace on a virtual clock), ``aws`` (boto3 against a moto server over
HTTP) and ``gcp`` (google-cloud-compute against the local Compute REST server).
Each ``Harness`` knows how to play its cloud: make a foreign instance, run it
out of capacity, reclaim an instance.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from google.auth.credentials import AnonymousCredentials

from spotfleet.clock import FakeClock
from spotfleet.errors import InstanceNotFound, InsufficientCapacity, NotOwned, ProviderError, QuotaExceeded
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.offering import Market, Offering
from spotfleet.providers.base import (
    TAG_CLUSTER,
    TAG_INSTANCE_ID,
    TAG_REQUEST_ID,
    AgentBootstrap,
    CloudState,
    LaunchRequest,
    Provider,
    ProviderInstance,
)
from tests.providers.aws import aws_moto
from tests.providers.gcp.gce_server import ComputeServer, FakeCompute
from tests.providers.gcp.gcp_support import ZONES as GCP_ZONES
from tests.sim.helpers import trace_file

CLUSTER = "contract"
FOREIGN = "someone-else"
PROVIDERS = ("fake", "local", "sim", "aws", "gcp")


@dataclass
class Harness:
    """A provider plus the ways a test plays its cloud."""

    provider: Provider
    spot: Offering  # an offering a one-instance launch gets
    make_foreign: Callable[[], str]  # an instance of another cluster; its provider id
    exhaust: Callable[[], None]  # the next launch of ``spot`` finds no capacity (or quota)
    reclaim: Callable[[str], None]  # the cloud reclaims this instance (notice and/or termination)
    advance: Callable[[], None] = lambda: None  # let the cloud's time pass between polls
    cleanup: list[Callable[[], None]] = field(default_factory=list)


def launch_request(offering: Offering, request_id: str, *, cluster: str = CLUSTER, count: int = 1) -> LaunchRequest:
    """As the executor builds it: ownership, request id and the controller's instance id as tags."""
    return LaunchRequest(
        request_id=request_id,
        offering=offering,
        bootstrap=AgentBootstrap("http://127.0.0.1:9", "contract-agent-token", "0.1.0", cluster),
        tags={TAG_CLUSTER: cluster, TAG_REQUEST_ID: request_id, TAG_INSTANCE_ID: f"i-{request_id}"},
        count=count,
    )


def first_spot(provider: Provider, **where: str) -> Offering:
    found = sorted(
        (
            o
            for o in provider.offerings()
            if o.market is Market.SPOT and all(getattr(o, k) == v for k, v in where.items())
        ),
        key=lambda o: (o.price_per_hour, o.key),
    )
    assert found, f"{provider.name} offers no spot {where}"
    return found[0]


# ---------------------------------------------------------------- the five clouds


def fake_harness(tmp_path: Path) -> Harness:
    from spotfleet.providers.fake import FakeProvider, both_markets

    p = FakeProvider(offering_list=both_markets("g5.xlarge", gpu="A10G"), clock=FakeClock(), cluster=CLUSTER)
    spot = first_spot(p)
    return Harness(
        provider=p,
        spot=spot,
        make_foreign=lambda: p.add_foreign("fake-foreign", tags={TAG_CLUSTER: FOREIGN}).provider_id,
        exhaust=lambda: p.fail_next_launch(InsufficientCapacity([spot])),
        reclaim=lambda pid: p.reclaim(pid),
    )


def local_harness(tmp_path: Path) -> Harness:
    from spotfleet.providers.local import LocalProvider

    state = tmp_path / "local"
    p = LocalProvider(state_dir=state, cluster=CLUSTER, max_instances=2, heartbeat_seconds=5)
    other = LocalProvider(state_dir=state, cluster=FOREIGN, max_instances=8, heartbeat_seconds=5)
    spot = first_spot(p, instance_type="g5.xlarge")

    def make_foreign() -> str:
        return other.launch(launch_request(spot, "foreign-1", cluster=FOREIGN))[0].provider_id

    def exhaust() -> None:  # the local provider's quota: at most max_instances alive
        for n in range(2):
            p.launch(launch_request(spot, f"filler-{n}"))

    def reclaim(pid: str) -> None:
        deadline = time.monotonic() + 60
        while True:  # the host process must be up (its metadata server) before a notice can reach it
            try:
                p.interrupt(pid, kind=NoticeKind.SPOT_INTERRUPTION, notice=timedelta(seconds=30))
                return
            except InstanceNotFound:
                assert time.monotonic() < deadline, "the local instance's host never came up"
                time.sleep(0.2)

    return Harness(
        provider=p, spot=spot, make_foreign=make_foreign, exhaust=exhaust, reclaim=reclaim,
        cleanup=[p.stop_all, other.stop_all],
    )  # fmt: skip


def sim_harness(tmp_path: Path) -> Harness:
    from spotfleet.sim.provider import SimProvider
    from spotfleet.sim.traces import build_trace_set

    tick = 600
    # one instance of capacity for two ticks, then none (the reclaim), then back
    files = [trace_file("us-east-1a", [1, 1, 0, 1], tick=tick, spot=0.9, start="2026-03-02T00:00:00Z")]
    traces = build_trace_set([(f.zone, f) for f in files])
    clock = FakeClock(traces.epoch)
    p = SimProvider(traces, clock=clock, cluster=CLUSTER)
    spot = first_spot(p)

    def exhaust() -> None:
        p.launch(launch_request(spot, "filler"))  # the zone's only spot instance

    return Harness(
        provider=p,
        spot=spot,
        make_foreign=lambda: (
            p.launch(launch_request(p.offerings().on_demand()[0], "foreign-1", cluster=FOREIGN))[0].provider_id
        ),
        exhaust=exhaust,
        reclaim=lambda pid: clock.advance(2 * tick - 120),  # the trace takes it back at 2 ticks
        advance=lambda: clock.advance(60),
    )


def aws_harness(tmp_path: Path, moto: str) -> Harness:
    from spotfleet.providers.aws import AwsProvider

    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=aws_moto.REGION)
    ec2 = session.client("ec2", endpoint_url=moto)
    zone_ids = {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    subnets = {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]}
    clock = FakeClock(datetime(2026, 3, 2, 12, 0, tzinfo=UTC))
    session.events.register(
        "before-send.ec2.DescribeSpotPriceHistory", aws_moto.CatalogPrices(zone_ids=zone_ids, now=clock.now())
    )
    fleet = aws_moto.FleetShim(subnet_zone={v: k for k, v in subnets.items()}).install(session)
    # the EventBridge rule → SQS queue the terraform module sets up, so reclaims reach poll_events
    sqs = session.client("sqs", endpoint_url=moto)
    queue = str(sqs.create_queue(QueueName="spotfleet-events", Attributes={"VisibilityTimeout": "0"})["QueueUrl"])
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = session.client("events", endpoint_url=moto)
    events.put_rule(Name="spotfleet-ec2", EventPattern=json.dumps(aws_moto.RULE_PATTERN))
    events.put_targets(Rule="spotfleet-ec2", Targets=[{"Id": "sqs", "Arn": arn}])
    zone = sorted(subnets)[0]
    config = aws_moto.make_config(moto, subnets={zone: [subnets[zone]]}, sqs_queue_url=queue)
    p = AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)
    spot = first_spot(p, instance_type="g5.xlarge")

    def exhaust() -> None:
        fleet.stocked_out[(spot.instance_type, spot.zone)] = "InsufficientInstanceCapacity"

    def reclaim(pid: str) -> None:
        detail = {"instance-id": pid, "instance-action": "terminate"}
        entry = aws_moto.eventbridge_event(aws_moto.aws_events.SPOT_WARNING, detail)
        assert events.put_events(Entries=[entry])["FailedEntryCount"] == 0

    return Harness(
        provider=p,
        spot=spot,
        make_foreign=lambda: aws_moto.run_foreign(ec2, tags={TAG_CLUSTER: FOREIGN}),
        exhaust=exhaust,
        reclaim=reclaim,
    )


def gcp_harness(tmp_path: Path, server: ComputeServer) -> Harness:
    from spotfleet.providers.gcp import GcpProvider
    from spotfleet.providers.gcp_config import GcpProviderConfig

    gce: FakeCompute = server.compute
    config = GcpProviderConfig(
        project=gce.project,
        zones=GCP_ZONES,
        api_endpoint=server.endpoint,
        service_account="spotfleet-node@test-project.iam.gserviceaccount.com",
    )
    p = GcpProvider(config, cluster=CLUSTER, clock=FakeClock(), credentials=AnonymousCredentials())
    spot = first_spot(p, instance_type="g2-standard-4", zone=GCP_ZONES[0])

    def make_foreign() -> str:
        gce.add_foreign_instance(GCP_ZONES[0], "hand-made-vm", labels={"spotfleet-cluster": FOREIGN})
        return f"{GCP_ZONES[0]}/hand-made-vm"

    def reclaim(pid: str) -> None:
        zone, name = pid.split("/")
        gce.preempt(zone, name)

    return Harness(
        provider=p, spot=spot, make_foreign=make_foreign, exhaust=lambda: gce.stockout(spot.zone), reclaim=reclaim
    )


@pytest.fixture(params=PROVIDERS)
def cloud(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    name = request.param
    if name == "aws":
        harness = aws_harness(tmp_path, request.getfixturevalue("moto"))
    elif name == "gcp":
        server = ComputeServer(FakeCompute(zones=GCP_ZONES))
        server.__enter__()
        request.addfinalizer(lambda: server.__exit__(None, None, None))
        harness = gcp_harness(tmp_path, server)
    else:
        harness = {"fake": fake_harness, "local": local_harness, "sim": sim_harness}[name](tmp_path)
    try:
        yield harness
    finally:
        for stop in harness.cleanup:
            stop()


def ids(instances: list[ProviderInstance]) -> list[str]:
    return sorted(i.provider_id for i in instances)


def alive(provider: Provider) -> list[str]:
    return ids([i for i in provider.list_instances() if i.state is not CloudState.TERMINATED])


# ---------------------------------------------------------------- the contract


def test_is_a_provider_and_names_its_offerings(cloud: Harness) -> None:
    p = cloud.provider
    assert isinstance(p, Provider)
    offers = list(p.offerings())
    assert offers and {o.provider for o in offers} == {p.name}
    assert {Market.SPOT, Market.ON_DEMAND} <= {o.market for o in offers}
    assert all(o.price_per_hour >= 0 and o.gpu_count >= 0 for o in offers)


def test_launch_is_idempotent_per_request_id(cloud: Harness) -> None:
    p = cloud.provider
    first = p.launch(launch_request(cloud.spot, "req-same"))
    assert len(first) == 1
    again = p.launch(launch_request(cloud.spot, "req-same"))
    assert ids(again) == ids(first), "a re-issued launch returns the first call's instances"
    listed = [i for i in p.list_instances() if i.request_id == "req-same"]
    assert ids(listed) == ids(first), "and buys nothing more"
    [inst] = listed
    assert inst.provider == p.name and inst.market is Market.SPOT and inst.zone == cloud.spot.zone
    assert inst.instance_type == cloud.spot.instance_type
    assert inst.tags[TAG_CLUSTER] == CLUSTER and inst.spotfleet_id == "i-req-same"


def test_list_returns_this_clusters_instances_only(cloud: Harness) -> None:
    p = cloud.provider
    ours = p.launch(launch_request(cloud.spot, "req-ours"))
    foreign = cloud.make_foreign()
    listed = p.list_instances()
    assert ids(listed) == ids(ours)
    assert foreign not in {i.provider_id for i in listed}
    assert all(i.tags.get(TAG_CLUSTER) == CLUSTER for i in listed)


def test_terminate_refuses_an_instance_it_does_not_own(cloud: Harness) -> None:
    p = cloud.provider
    [ours] = p.launch(launch_request(cloud.spot, "req-keep"))
    foreign = cloud.make_foreign()
    with pytest.raises(NotOwned) as refused:
        p.terminate([foreign], request_id="term-foreign")
    assert refused.value.instance_id == foreign
    assert isinstance(refused.value, ProviderError)
    assert alive(p) == [ours.provider_id], "a refused terminate touches nothing of ours"


def test_terminate_gives_back_unknown_is_typed_and_twice_is_a_no_op(cloud: Harness) -> None:
    p = cloud.provider
    [inst] = p.launch(launch_request(cloud.spot, "req-end"))
    p.terminate([inst.provider_id], request_id="term-1")
    p.terminate([inst.provider_id], request_id="term-2")  # already gone: no error
    assert inst.provider_id not in alive(p)
    # a cloud that deletes on terminate (GCP) may no longer know it: also the contract
    with contextlib.suppress(InstanceNotFound):
        assert p.get(inst.provider_id).state in (CloudState.STOPPING, CloudState.TERMINATED)
    unknown = {"aws": "i-0123456789abcdef0", "gcp": f"{GCP_ZONES[0]}/never-made"}.get(p.name, "never-made-0001")
    with pytest.raises(InstanceNotFound):
        p.get(unknown)
    with pytest.raises(InstanceNotFound):
        p.terminate([unknown], request_id="term-unknown")


def test_no_capacity_is_a_typed_error_and_buys_nothing(cloud: Harness) -> None:
    p = cloud.provider
    cloud.exhaust()
    before = alive(p)
    with pytest.raises((InsufficientCapacity, QuotaExceeded)) as caught:
        p.launch(launch_request(cloud.spot, "req-no-room"))
    if isinstance(caught.value, InsufficientCapacity):
        assert cloud.spot.key in {o.key for o in caught.value.offerings}, "names the offering that had no room"
    assert alive(p) == before
    assert not [i for i in p.list_instances() if i.request_id == "req-no-room"]


def test_poll_events_reports_a_reclaim_of_that_instance(cloud: Harness) -> None:
    p = cloud.provider
    assert all(isinstance(e, InstanceEvent) for e in p.poll_events())
    [inst] = p.launch(launch_request(cloud.spot, "req-reclaimed"))
    cloud.reclaim(inst.provider_id)
    seen: list[InstanceEvent] = []
    deadline = time.monotonic() + 30
    while not any(e.provider_instance_id == inst.provider_id for e in seen):
        assert time.monotonic() < deadline, f"no event for {inst.provider_id}; saw {seen}"
        cloud.advance()
        seen.extend(p.poll_events())
        time.sleep(0.05)  # the local provider's host and moto's delivery are real processes
    mine = [e for e in seen if e.provider_instance_id == inst.provider_id]
    for event in seen:
        assert isinstance(event, InstanceEvent) and event.provider == p.name
        assert event.observed_at.tzinfo is not None
    assert {e.kind for e in mine} & {NoticeKind.SPOT_INTERRUPTION, NoticeKind.TERMINATED}
    for event in mine:
        if event.kind is NoticeKind.SPOT_INTERRUPTION and event.deadline is not None:
            assert event.deadline >= event.observed_at - timedelta(seconds=1)
