"""SimProvider: offerings, capacity-checked launches, reclaims with notices, billing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from spotfleet.catalog import load_catalog
from spotfleet.clock import FakeClock
from spotfleet.errors import InstanceNotFound, InsufficientCapacity, NotOwned, PermanentError
from spotfleet.model.events import NoticeKind
from spotfleet.model.offering import Market, Offering
from spotfleet.providers.base import (
    TAG_CLUSTER,
    TAG_REQUEST_ID,
    AgentBootstrap,
    CloudState,
    LaunchRequest,
    Provider,
)
from spotfleet.sim.provider import SimProvider
from spotfleet.sim.traces import TraceSet

from .helpers import MakeSet

TICK = 600


def request(offering: Offering, request_id: str, *alternatives: Offering, cluster: str = "default") -> LaunchRequest:
    return LaunchRequest(
        request_id=request_id,
        offering=offering,
        alternatives=alternatives,
        bootstrap=AgentBootstrap("http://127.0.0.1:1", "token", "0", cluster),
        tags={TAG_CLUSTER: cluster, TAG_REQUEST_ID: request_id},
    )


def provider(traces: TraceSet, **kwargs: object) -> tuple[SimProvider, FakeClock]:
    clock = FakeClock(traces.epoch)
    return SimProvider(traces, clock=clock, **kwargs), clock  # type: ignore[arg-type]


def spot(p: SimProvider, zone: str) -> Offering:
    found = p.offerings().spot().where(lambda o: o.zone == zone)
    assert len(found) == 1
    return found[0]


def on_demand(p: SimProvider, zone: str) -> Offering:
    return p.offerings().on_demand().where(lambda o: o.zone == zone)[0]


def test_is_a_provider_and_offers_both_markets_per_zone(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 0]), ("us-east-1b", [0, 1]), tick=TICK, spot=[0.9, 1.1])
    p, clock = provider(traces)
    assert isinstance(p, Provider)
    offers = p.offerings()
    assert len(offers) == 4 and {o.provider for o in offers} == {"sim"}
    a, b = spot(p, "us-east-1a"), spot(p, "us-east-1b")
    assert (a.available, b.available) == (True, False)
    assert a.price_per_hour == 0.9 and a.gpu_memory_gib == 16 and a.vcpus == 8  # hardware from the catalog
    assert on_demand(p, "us-east-1b").available and on_demand(p, "us-east-1b").price_per_hour == 3.0
    clock.advance(TICK)
    assert (spot(p, "us-east-1a").available, spot(p, "us-east-1b").available) == (False, True)
    assert spot(p, "us-east-1a").price_per_hour == 1.1


def test_spot_launch_needs_capacity_and_names_the_failed_offering(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [2, 2]), ("us-east-1b", [0, 0]), tick=TICK)
    p, _ = provider(traces)
    a, b = spot(p, "us-east-1a"), spot(p, "us-east-1b")
    with pytest.raises(InsufficientCapacity) as err:
        p.launch(request(b, "r0"))
    assert [o.key for o in err.value.offerings] == [b.key]
    made = p.launch(request(b, "r1", a))  # the alternative has capacity
    assert [(i.zone, i.market, i.state) for i in made] == [("us-east-1a", Market.SPOT, CloudState.RUNNING)]
    p.launch(request(a, "r2"))
    with pytest.raises(InsufficientCapacity):
        p.launch(request(a, "r3"))  # two running, capacity two
    assert p.launch(request(on_demand(p, "us-east-1b"), "r4"))[0].market is Market.ON_DEMAND
    assert p.capacity_errors == 2 and p.launches == 3


def test_launch_is_idempotent_per_request_id(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 1]), tick=TICK)
    p, _ = provider(traces)
    first = p.launch(request(spot(p, "us-east-1a"), "same"))
    again = p.launch(request(spot(p, "us-east-1a"), "same"))
    assert [i.provider_id for i in again] == [i.provider_id for i in first]
    assert len(p.list_instances()) == 1


def test_unknown_offering_is_a_permanent_error(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1]), tick=TICK)
    p, _ = provider(traces)
    from dataclasses import replace

    with pytest.raises(PermanentError):
        p.launch(request(replace(spot(p, "us-east-1a"), zone="eu-west-1a"), "x"))


def test_reclaim_is_announced_with_the_aws_notice_then_terminates(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 1, 0, 1]), tick=TICK, spot=2.0)
    p, clock = provider(traces)
    (inst,) = p.launch(request(spot(p, "us-east-1a"), "r"))
    reclaim = traces.epoch + timedelta(seconds=2 * TICK)
    assert p.next_event_at() == reclaim - timedelta(seconds=120)
    clock.advance(2 * TICK - 121)
    assert p.poll_events() == []
    clock.advance(1)
    (notice,) = p.poll_events()
    assert notice.kind is NoticeKind.SPOT_INTERRUPTION and notice.provider_instance_id == inst.provider_id
    assert notice.deadline == reclaim and notice.observed_at == reclaim - timedelta(seconds=120)
    assert p.get(inst.provider_id).state is CloudState.RUNNING  # still running during the notice
    assert p.poll_events() == []  # delivered once
    clock.advance(120)
    (gone,) = p.poll_events()
    assert gone.kind is NoticeKind.TERMINATED and gone.observed_at == reclaim
    assert p.get(inst.provider_id).state is CloudState.TERMINATED
    (bill,) = p.bills()
    assert bill.reclaimed and bill.seconds == 2 * TICK and bill.cost == pytest.approx(2.0 * 2 * TICK / 3600)
    assert p.reclaims == 1


def test_gcp_notice_is_thirty_seconds(make_set: MakeSet) -> None:
    traces = make_set(("us-central1-a", [1, 0]), tick=TICK, cloud="gcp", instance_type="a3-highgpu-8g")
    p, clock = provider(traces)
    p.launch(request(spot(p, "us-central1-a"), "r"))
    clock.advance(TICK - 31)
    assert p.poll_events() == []
    clock.advance(1)
    (notice,) = p.poll_events()
    assert notice.deadline is not None and notice.deadline - notice.observed_at == timedelta(seconds=30)


def test_only_what_exceeds_capacity_is_reclaimed_newest_first(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [2, 2, 1, 1]), tick=TICK)
    p, clock = provider(traces)
    old = p.launch(request(spot(p, "us-east-1a"), "old"))[0]
    clock.advance(60)
    new = p.launch(request(spot(p, "us-east-1a"), "new"))[0]
    clock.advance(3 * TICK)
    assert p.get(old.provider_id).state is CloudState.RUNNING
    assert p.get(new.provider_id).state is CloudState.TERMINATED
    kinds = [(e.provider_instance_id, e.kind) for e in p.poll_events()]
    assert kinds == [
        (new.provider_id, NoticeKind.SPOT_INTERRUPTION),
        (new.provider_id, NoticeKind.TERMINATED),
    ]


def test_a_launch_inside_the_notice_window_gets_a_short_notice(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [2, 1]), tick=TICK)
    p, clock = provider(traces)
    p.launch(request(spot(p, "us-east-1a"), "first"))
    clock.advance(TICK - 50)  # the boundary at TICK is already decided for "first" (it survives)
    late = p.launch(request(spot(p, "us-east-1a"), "late"))[0]
    (notice,) = p.poll_events()
    assert notice.provider_instance_id == late.provider_id
    assert notice.observed_at == clock.now() and notice.deadline == traces.epoch + timedelta(seconds=TICK)


def test_spot_ends_where_the_trace_ends(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 1]), tick=TICK)
    p, clock = provider(traces)
    (inst,) = p.launch(request(spot(p, "us-east-1a"), "r"))
    clock.advance(3 * TICK)
    assert p.get(inst.provider_id).state is CloudState.TERMINATED
    assert p.bills()[0].seconds == 2 * TICK


def test_billing_per_second_at_each_ticks_price(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 1, 1]), tick=TICK, spot=[1.0, 2.0, 4.0], on_demand=3.0)
    p, clock = provider(traces)
    clock.advance(300)
    (s,) = p.launch(request(spot(p, "us-east-1a"), "s"))
    (o,) = p.launch(request(on_demand(p, "us-east-1a"), "o"))
    clock.advance(1200)  # to 1500 s: 300 s at $1, 600 s at $2, 300 s at $4
    p.terminate([s.provider_id, o.provider_id], request_id="t")
    clock.advance(TICK)
    bills = {b.provider_id: b for b in p.bills()}
    assert bills[s.provider_id].cost == pytest.approx((300 * 1 + 600 * 2 + 300 * 4) / 3600)
    assert bills[o.provider_id].cost == pytest.approx(1200 * 3.0 / 3600)
    assert p.cost() == pytest.approx(0.75 + 1.0)
    assert p.cost(until=traces.epoch + timedelta(seconds=900)) == pytest.approx((300 + 600) / 3600 + 600 * 3 / 3600)


def test_terminate_contracts(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 1]), tick=TICK)
    p, _ = provider(traces)
    (mine,) = p.launch(request(on_demand(p, "us-east-1a"), "mine"))
    (theirs,) = p.launch(request(on_demand(p, "us-east-1a"), "theirs", cluster="other"))
    with pytest.raises(InstanceNotFound):
        p.terminate(["sim-nope"], request_id="t")
    with pytest.raises(NotOwned):
        p.terminate([theirs.provider_id], request_id="t")
    p.terminate([mine.provider_id], request_id="t")
    p.terminate([mine.provider_id], request_id="t")  # already terminated: a no-op
    listed = p.list_instances()
    assert [(i.provider_id, i.state) for i in listed] == [(mine.provider_id, CloudState.TERMINATED)]
    with pytest.raises(InstanceNotFound):
        p.get("sim-nope")


def test_catalog_fills_instance_types_the_traces_do_not_cover(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1]), tick=TICK)
    catalog = load_catalog(["aws"])
    p, _ = provider(traces, catalog=catalog)
    extra = p.offerings().where(lambda o: o.instance_type != "p3.2xlarge")
    assert len(extra) > 10 and all(o.market is Market.ON_DEMAND for o in extra)
    assert {o.provider for o in extra} == {"sim"}
    (inst,) = p.launch(request(extra[0], "x"))
    assert inst.instance_type == extra[0].instance_type
    with_spot, _ = provider(traces, catalog=catalog, catalog_spot=True)
    assert len(with_spot.offerings().spot()) > 1


def test_boot_delay_shows_pending_then_running(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 1]), tick=TICK)
    p, clock = provider(traces, boot_seconds=60)
    (inst,) = p.launch(request(on_demand(p, "us-east-1a"), "r"))
    assert inst.state is CloudState.PENDING
    clock.advance(60)
    assert p.get(inst.provider_id).state is CloudState.RUNNING
