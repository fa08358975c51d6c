"""``spotfleet down``: the fleet is held, busy instances are drained (jobs
checkpoint and wait), every instance is given back, nothing is bought until
``resume``. Driven through the controller's own entry points on a fake cloud."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from spotfleet.controller.sync import CHECKPOINTED_EXIT_CODE
from spotfleet.model import InstanceState, JobState
from spotfleet.model.snapshot import Budget
from spotfleet.overview import overview
from spotfleet.store import Store
from spotfleet.wire import Heartbeat, JobStatus
from tests.controller.harness import TOKEN, make_harness


def test_down_drains_gives_everything_back_and_resume_buys_again(store: Store, tmp_path: Path) -> None:
    h = make_harness(store, tmp_path)
    spot = h.submit(name="sweep", priority="opportunistic")
    critical = h.submit(name="eval", priority="critical")
    h.step()
    h.register_all()
    h.step()
    busy = {i.id for i in h.live()}
    assert len(busy) == 2 and {h.job(spot.id).state, h.job(critical.id).state} == {JobState.BOUND}
    for job in (spot, critical):
        inst = h.job(job.id).instance_ids[0]
        h.controller.agents.heartbeat(
            TOKEN + inst, Heartbeat(jobs=[JobStatus(job_id=job.id, attempt=1, status="running")])
        )
    h.step()
    assert h.job(critical.id).state is JobState.RUNNING
    launches_before = len(h.provider.calls_named("launch"))

    hold = h.controller.down(grace=timedelta(seconds=30))
    assert h.store.fleet_hold(h.controller.cluster) == hold
    h.step()
    for job in (spot, critical):  # a critical job is drained too: it checkpoints, it is not killed
        got = h.job(job.id)
        assert got.state is JobState.DRAINING
        assert got.drain_deadline == h.clock.now() + timedelta(seconds=30)
        h.controller.agents.heartbeat(TOKEN + got.instance_ids[0], Heartbeat(jobs=[JobStatus(
            job_id=job.id, attempt=1, status="exited", exit_code=CHECKPOINTED_EXIT_CODE)]))  # fmt: skip
    h.step()
    h.step()
    assert [h.job(j.id).state for j in (spot, critical)] == [JobState.PENDING, JobState.PENDING]
    assert not h.live(), "every instance given back"
    assert all(h.instance(i).state is InstanceState.TERMINATED for i in busy)
    h.clock.advance(seconds=600)
    h.step()
    assert len(h.provider.calls_named("launch")) == launches_before, "nothing bought while the fleet is down"
    view = overview(h.store, now=h.clock.now(), budgets=[Budget(10.0)], hold=h.store.fleet_hold("default"))
    assert view["down"] is not None and view["fleet"] == []
    assert any(e["kind"] == "fleet.down" for e in view["events"])

    assert h.controller.resume() is True
    assert h.controller.resume() is False
    h.step()
    assert len(h.provider.calls_named("launch")) > launches_before
    assert {h.job(spot.id).state, h.job(critical.id).state} == {JobState.BOUND}


def test_down_gives_back_idle_instances_at_once(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path, idle_ttl=timedelta(hours=1))
    job = h.submit(name="short")
    h.step()
    h.register_all()
    inst = h.job(job.id).instance_ids[0]
    h.controller.agents.heartbeat(TOKEN + inst, Heartbeat(jobs=[JobStatus(job_id=job.id, attempt=1, status="exited",
                                                                    exit_code=0)]))  # fmt: skip
    h.step()
    assert h.job(job.id).state is JobState.SUCCEEDED and h.live(), "idle, kept for its TTL"
    h.controller.down(grace=timedelta(minutes=2))
    h.step()
    assert not h.live()


def test_health_reports_steps_and_failures(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    assert h.controller.health()["health"] == "starting"
    h.step()
    assert h.controller.health()["health"] == "ok"
    h.clock.advance(seconds=60)
    assert h.controller.health()["health"] == "stale"
