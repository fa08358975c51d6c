"""Leader election and fencing (``spotfleet.store.election``) on both
backends, with a fake clock: two controllers share one store, only the lease
holder steps, and a deposed leader can neither commit nor call the cloud."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from spotfleet.clock import FakeClock
from spotfleet.errors import Fenced
from spotfleet.model.instance import InstanceState
from spotfleet.model.snapshot import random_ids
from spotfleet.providers.fake import FakeProvider, gpu_offering
from spotfleet.store import Store
from spotfleet.store.election import Elector
from spotfleet.store.store import Changes, EventRecord
from tests.controller.harness import make_harness

TTL = timedelta(seconds=10)


def electors(store: Store, clock: FakeClock, n: int = 2) -> list[Elector]:
    return [Elector(store, cluster="default", clock=clock, ttl=TTL, identity=f"replica-{i}") for i in range(n)]


def test_one_leader_at_a_time_and_takeover_after_the_ttl(store: Store) -> None:
    clock = FakeClock()
    a, b = electors(store, clock)
    assert a.tick() is True and a.epoch == 1
    assert b.tick() is False
    assert b.status() == {"role": "follower", "epoch": 1, "identity": "replica-1", "leader": b.leader}
    assert b.leader["holder"] == "replica-0"
    clock.advance(6)
    assert a.tick() is True  # renewed: expires 10 s from now
    clock.advance(6)
    assert b.tick() is False  # 12 s after the first grant, but renewed at 6 s
    clock.advance(5)  # a stopped renewing at 6 s: its lease ran out at 16 s
    assert a.is_leader is False  # it knows by its own clock, before anyone takes over
    assert b.tick() is True and b.epoch == 2
    assert a.tick() is False and a.leader["holder"] == "replica-1"


def test_a_clean_release_hands_over_at_the_next_tick(store: Store) -> None:
    clock = FakeClock()
    a, b = electors(store, clock)
    a.tick()
    a.release()
    assert a.is_leader is False
    assert b.tick() is True and b.epoch == 2


def test_a_deposed_leader_cannot_commit(store: Store) -> None:
    clock = FakeClock()
    a, b = electors(store, clock)
    a.tick()
    event = EventRecord(at=clock.now(), kind="test", message="from the leader")
    with store.fenced(a):
        store.commit(Changes(events=[event]), now=clock.now())
    clock.advance(11)  # a is paused past its lease; b takes over
    assert b.tick() is True
    a.expires_at = clock.now() + TTL  # a still *believes* it leads (paused before it noticed)
    late = EventRecord(at=clock.now(), kind="test", message="from the ex-leader")
    with store.fenced(a), pytest.raises(Fenced):
        store.commit(Changes(events=[late]), now=clock.now())
    assert [e.message for e in store.events(kind_prefix="test")] == ["from the leader"]
    assert a.is_leader is False  # the failed check deposed it
    # writes outside the fenced block (the API's inbox) are not fenced
    store.add_event(EventRecord(at=clock.now(), kind="test", message="inbox"))
    assert [e.message for e in store.events(kind_prefix="test")][-1] == "inbox"


def test_only_the_leader_steps_and_a_fenced_leader_launches_nothing(store: Store, tmp_path: Path) -> None:
    cloud = FakeProvider(offering_list=[gpu_offering()])  # one cloud, two controller replicas
    leader = make_harness(store, tmp_path / "a", cloud)
    follower = make_harness(store, tmp_path / "b", cloud)
    follower.clock = leader.clock
    follower.controller.clock = leader.clock
    follower.controller.new_id = random_ids()  # replicas never share an id sequence
    ea = Elector(store, cluster="default", clock=leader.clock, ttl=TTL, identity="a")
    eb = Elector(store, cluster="default", clock=leader.clock, ttl=TTL, identity="b")
    leader.controller.lead_with(ea)
    follower.controller.lead_with(eb)
    ea.tick()
    eb.tick()
    job = follower.submit(name="train")  # through the follower: an inbox write
    assert follower.controller.step().skipped == "follower"
    assert cloud.calls_named("launch") == []
    leader.step()
    (inst,) = store.list_instances(live_only=True)
    assert store.get_job(job.id).state.value == "bound"
    assert len(cloud.calls_named("launch")) == 1

    # the leader is paused past its lease; the follower takes over
    leader.clock.advance(11)
    assert eb.tick() is True
    ea.expires_at = leader.clock.now() + TTL  # resumed, still believing it leads
    second = follower.submit(name="second")
    report = leader.controller.step()
    assert report.skipped is not None and report.skipped.startswith("fenced")
    assert len(cloud.calls_named("launch")) == 1  # no new launch by the ex-leader
    assert store.get_job(second.id).state.value == "pending"  # nor any write
    follower.step()  # the new leader carries on from the store
    assert store.get_job(second.id).state.value == "bound"
    assert store.get_instance(inst.id).state in (InstanceState.PROVISIONING, InstanceState.RUNNING)


def test_a_fenced_leader_stops_right_before_a_cloud_call(sqlite_store: Store, tmp_path: Path) -> None:
    """The check before each launch: the step committed its intent, then lost the
    lease before calling the cloud: it must not launch."""
    h = make_harness(sqlite_store, tmp_path, FakeProvider(offering_list=[gpu_offering()]))
    ea = Elector(sqlite_store, cluster="default", clock=h.clock, ttl=TTL, identity="a")
    eb = Elector(sqlite_store, cluster="default", clock=h.clock, ttl=TTL, identity="b")
    h.controller.lead_with(ea)
    ea.tick()
    verify = ea.verify

    def lose_then_verify() -> None:  # the lease moves between the intent and the call
        h.clock.advance(11)
        eb.tick()
        verify()

    h.controller.executor.before_cloud_call = lose_then_verify
    h.submit(name="train")
    report = h.controller.step()
    assert report.skipped is not None and report.skipped.startswith("fenced")
    assert h.provider.calls_named("launch") == []
    (inst,) = sqlite_store.list_instances(live_only=True)  # the intent, adoptable by the successor
    assert inst.state is InstanceState.REQUESTED


def test_a_follower_ticks_right_after_the_leaders_lease_runs_out(sqlite_store: Store) -> None:
    clock = FakeClock()
    a, b = electors(sqlite_store, clock)
    a.tick()
    b.tick()
    assert a.next_tick_in(2.0) == 2.0  # the leader renews on its period
    clock.advance(9)
    assert b.next_tick_in(2.0) == pytest.approx(1.05)  # 1 s left on the lease
    clock.advance(1.05)
    assert b.tick() is True
