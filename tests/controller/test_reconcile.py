"""The reconcile step against the fake provider: place, run, finish, scale to zero,
survive errors and restarts. Time moves only when the test moves it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from spotfleet.controller.sync import CHECKPOINTED_EXIT_CODE
from spotfleet.errors import InsufficientCapacity, PermanentError, Throttled
from spotfleet.model import InstanceState, JobState
from spotfleet.model.events import NoticeKind
from spotfleet.model.offering import Market
from spotfleet.providers.base import TAG_CLUSTER, TAG_REQUEST_ID
from spotfleet.providers.fake import FakeProvider, both_markets, gpu_offering
from spotfleet.store import Store
from tests.controller.harness import TOKEN, make_harness


def test_each_class_gets_its_market_and_the_cheapest_fit(sqlite_store: Store, tmp_path: Path) -> None:
    offers = both_markets() + both_markets("p3.8xlarge", gpus=4, spot=3.2, on_demand=12.24)
    h = make_harness(sqlite_store, tmp_path, FakeProvider(offering_list=offers))
    spot_job = h.submit(name="sweep", priority="opportunistic")
    od_job = h.submit(name="eval", priority="critical", resources={"gpus": 2})
    h.step()
    spot_inst = h.instance(h.job(spot_job.id).instance_ids[0])
    od_inst = h.instance(h.job(od_job.id).instance_ids[0])
    assert (spot_inst.market, spot_inst.offering.instance_type) == (Market.SPOT, "p3.2xlarge")
    assert (od_inst.market, od_inst.offering.instance_type) == (Market.ON_DEMAND, "p3.8xlarge")
    assert h.job(od_job.id).bindings[0].gpu_indices == (0, 1)
    assert {i.state for i in h.live()} == {InstanceState.PROVISIONING}
    launches = [c for c in h.provider.calls if c[0] == "launch"]
    assert len(launches) == 2 and all(c[1].tags[TAG_CLUSTER] == "default" for c in launches)


def test_full_lifecycle_to_zero(store: Store, tmp_path: Path) -> None:
    h = make_harness(store, tmp_path, idle_ttl=timedelta(minutes=5))
    job = h.submit(name="train", priority="normal")
    h.step()
    (inst,) = h.live()
    h.register_all()
    h.step()
    assert h.instance(inst.id).state is InstanceState.RUNNING
    answer = h.beat(inst.id)
    assert [a.job_id for a in answer.assignments] == [job.id]
    assert answer.assignments[0].checkpoint_dir.endswith(job.id)
    h.report(job, "running")
    h.step()
    assert h.job(job.id).state is JobState.RUNNING
    h.clock.advance(600)
    h.report(job, "exited", exit_code=0)
    h.step()
    assert h.job(job.id).state is JobState.SUCCEEDED
    assert h.beat(inst.id).assignments == []
    h.clock.advance(299)
    h.beat(inst.id)  # the agent is alive: only idleness may end this instance
    h.step()
    assert h.instance(inst.id).state is InstanceState.RUNNING  # not idle long enough yet
    h.clock.advance(2)
    h.beat(inst.id)
    h.step()
    assert h.instance(inst.id).state is InstanceState.TERMINATED
    assert h.live() == [] and h.provider.running() == []
    (seg,) = store.billing_segments(instance_id=inst.id)
    assert seg.end is not None and (seg.end - seg.start).total_seconds() == pytest.approx(901)
    attempts = store.job_attempts(job.id)
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "succeeded")]


def test_capacity_error_marks_the_pool_and_tries_the_next_offering_in_the_same_step(
    sqlite_store: Store, tmp_path: Path
) -> None:
    a = gpu_offering(zone="us-east-1a", spot=0.90)
    b = gpu_offering(zone="us-east-1b", spot=0.95)
    provider = FakeProvider(offering_list=[a, b])
    h = make_harness(sqlite_store, tmp_path, provider)
    provider.fail_next_launch(InsufficientCapacity([a]))
    job = h.submit(name="sweep", priority="opportunistic")
    h.step()
    inst = h.instance(h.job(job.id).instance_ids[0])
    assert inst.offering.zone == "us-east-1b" and inst.state is InstanceState.PROVISIONING
    state = sqlite_store.load_state()
    assert state.unavailable[a.key] == h.clock.now() + timedelta(minutes=5)
    failed = [i for i in sqlite_store.list_instances() if i.state is InstanceState.FAILED]
    assert len(failed) == 1 and failed[0].offering.zone == "us-east-1a"


def test_throttling_keeps_the_request_and_retries_with_the_same_id(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    h.provider.fail_next_launch(Throttled(2.0))
    h.submit(name="x")
    h.step()
    (inst,) = h.live()
    assert inst.state is InstanceState.REQUESTED
    h.clock.advance(2)  # the cloud's retry_after
    h.step()
    requests = [c[1].request_id for c in h.provider.calls if c[0] == "launch"]
    assert requests == [inst.request_id, inst.request_id]
    assert h.instance(inst.id).state is InstanceState.PROVISIONING


def test_permanent_error_is_surfaced_and_the_job_waits(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path, FakeProvider(offering_list=[gpu_offering()]))
    h.provider.fail_next_launch(PermanentError("UnauthorizedOperation: not allowed"))
    job = h.submit(name="x", priority="opportunistic")
    h.step()
    assert h.job(job.id).state is JobState.PENDING
    errors = [e for e in sqlite_store.events(limit=100) if e.level == "error"]
    assert any("UnauthorizedOperation" in e.message for e in errors)
    assert len([c for c in h.provider.calls if c[0] == "launch"]) == 1, "no retry storm"


def test_restart_between_decide_and_record_adopts_instead_of_launching_twice(store: Store, tmp_path: Path) -> None:
    h = make_harness(store, tmp_path)
    job = h.submit(name="x")
    # the step decides and records REQUESTED, then "crashes" before recording the launch
    h.provider.fail_next_launch(Throttled(1.0))
    h.step()
    (inst,) = h.live()
    from spotfleet.providers.base import AgentBootstrap, LaunchRequest

    h.provider.launch(LaunchRequest(inst.request_id, inst.offering, AgentBootstrap("u", "t", "0", "default"),
                                    {TAG_CLUSTER: "default", TAG_REQUEST_ID: inst.request_id}))  # fmt: skip
    # a new controller on the same store
    h2 = make_harness(store, tmp_path, h.provider)
    h2.clock.set(h.clock.now())
    h2.step()
    assert len(h2.provider.running()) == 1, "no duplicate instance"
    assert h2.instance(inst.id).state is InstanceState.PROVISIONING
    assert h2.job(job.id).state is JobState.BOUND


def test_leaked_instance_with_our_tag_is_terminated_foreign_ones_are_not(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    h.provider.add_foreign("fake-leak", tags={TAG_CLUSTER: "default", TAG_REQUEST_ID: "lost-request"})
    h.provider.add_foreign("fake-someone-else", tags={TAG_CLUSTER: "other-team"})
    h.step()
    assert [i.provider_id for i in h.provider.running()] == ["fake-someone-else"]


def test_spot_interruption_drains_requeues_and_replaces(store: Store, tmp_path: Path) -> None:
    a = gpu_offering(zone="us-east-1a", spot=0.90)
    b = gpu_offering(zone="us-east-1b", spot=0.95)
    h = make_harness(store, tmp_path, FakeProvider(offering_list=[a, b]))
    job = h.submit(name="train", priority="opportunistic", checkpoint={"interval": "10m"})
    h.step()
    h.register_all()
    h.report(job, "running")
    h.step()
    (inst,) = h.live()
    deadline = h.provider.preempt(inst.provider_id)  # type: ignore[arg-type]
    h.step()
    assert h.job(job.id).state is JobState.DRAINING
    assert h.instance(inst.id).state is InstanceState.DRAINING
    (replacement,) = [i for i in h.live() if i.id != inst.id]
    assert replacement.reserved_for == job.id, "the replacement is bought before the reclaim"
    assert replacement.offering.zone == "us-east-1b", "the interrupted pool is avoided for a while"
    drain = h.beat(inst.id).assignments[0].drain
    assert drain is not None and drain.deadline == deadline
    # the same notice again (agent + event bus) is handled once
    h.provider.preempt(inst.provider_id)  # type: ignore[arg-type]
    h.step()
    assert h.job(job.id).interruptions == 0 and h.job(job.id).state is JobState.DRAINING
    h.step()  # further steps while it checkpoints buy nothing more
    h.report(job, "exited", exit_code=CHECKPOINTED_EXIT_CODE)
    h.step()
    after = h.job(job.id)
    assert after.interruptions == 1 and after.attempt == 2
    assert h.instance(inst.id).state is InstanceState.TERMINATED  # drained: given back before the reclaim
    assert after.instance_ids == (replacement.id,) and after.state is JobState.BOUND
    assert len(h.provider.calls_named("launch")) == 2, "exactly one replacement"


def test_gang_job_gets_a_full_reserved_replacement(sqlite_store: Store, tmp_path: Path) -> None:
    zones = [gpu_offering(zone="us-east-1a", spot=0.90), gpu_offering(zone="us-east-1b", spot=0.95)]
    h = make_harness(sqlite_store, tmp_path, FakeProvider(offering_list=zones))
    job = h.submit(name="ddp", resources={"gpus": 1, "nodes": 2}, priority="opportunistic")
    h.step()
    h.register_all()
    h.report(job, "running", rank=0)
    h.report(job, "running", rank=1)
    h.step()
    first = h.job(job.id).instance_ids
    h.provider.preempt(h.instance(first[0]).provider_id)  # type: ignore[arg-type]
    h.step()
    assert h.job(job.id).state is JobState.DRAINING
    reserved = [i for i in h.live() if i.reserved_for == job.id]
    assert len(reserved) == 2
    h.report(job, "exited", exit_code=CHECKPOINTED_EXIT_CODE, rank=0)
    h.report(job, "exited", exit_code=CHECKPOINTED_EXIT_CODE, rank=1)
    h.step()
    assert set(h.job(job.id).instance_ids) == {i.id for i in reserved}
    assert len(h.provider.calls_named("launch")) == 4


def test_notices_for_unknown_or_finished_instances_change_nothing(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    job = h.submit(name="x")
    h.step()
    h.register_all()
    h.report(job, "exited", exit_code=0)
    h.step()
    (inst,) = h.live()
    h.provider.preempt("fake-unknown")
    h.provider.preempt(inst.provider_id)  # type: ignore[arg-type]  # after the job finished
    h.step()
    assert h.job(job.id).state is JobState.SUCCEEDED and h.job(job.id).interruptions == 0
    assert h.instance(inst.id).state is InstanceState.TERMINATED, "an empty draining instance is given back"
    assert not [i for i in h.live() if i.reserved_for], "no replacement for a job that is done"


def test_rebalance_cordons_asks_for_an_early_checkpoint_and_prepares_a_replacement(
    sqlite_store: Store, tmp_path: Path
) -> None:
    zones = [gpu_offering(zone="us-east-1a", spot=0.90), gpu_offering(zone="us-east-1b", spot=0.95)]
    h = make_harness(sqlite_store, tmp_path, FakeProvider(offering_list=zones))
    job = h.submit(name="x", priority="opportunistic")
    h.step()
    h.register_all()
    h.report(job, "running")
    h.step()
    (inst,) = h.live()
    h.provider.preempt(inst.provider_id, kind=NoticeKind.REBALANCE)  # type: ignore[arg-type]
    h.step()
    assert h.job(job.id).state is JobState.RUNNING, "a soft signal kills nothing"
    assert h.instance(inst.id).cordoned and h.instance(inst.id).state is InstanceState.RUNNING
    (assignment,) = h.beat(inst.id).assignments
    assert assignment.checkpoint_now and assignment.drain is None
    assert [i.reserved_for for i in h.live() if i.id != inst.id] == [job.id]
    other = h.submit(name="y", priority="opportunistic")
    h.step()
    assert inst.id not in h.job(other.id).instance_ids, "no new placements on a cordoned instance"


def test_failures_retry_then_fail(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    job = h.submit(name="flaky", max_retries=1)
    h.step()
    h.register_all()
    h.report(job, "exited", exit_code=3)
    h.step()  # the failure is retried after a backoff (issue 14): requeued, not placed at once
    assert (h.job(job.id).state, h.job(job.id).failures) == (JobState.PENDING, 1)
    h.clock.advance(15)
    h.step()
    retried = h.job(job.id)
    assert (retried.state, retried.attempt, retried.failures) == (JobState.BOUND, 2, 1)
    h.report(job, "exited", exit_code=3)
    h.step()
    assert [a["outcome"] for a in sqlite_store.job_attempts(job.id)] == ["failed", "failed"]
    final = h.job(job.id)
    assert final.state is JobState.FAILED and final.failures == 2 and final.exit_code == 3


def test_cancel_running_job(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    job = h.submit(name="x")
    h.step()
    h.register_all()
    h.report(job, "running")
    h.step()
    inst_id = h.job(job.id).instance_ids[0]
    h.controller.cancel(job.id)
    h.step()
    assert h.job(job.id).state is JobState.CANCELLED
    assert h.beat(inst_id).assignments == [], "the agent is told to stop it"


def test_gang_job_gets_all_nodes_in_one_zone(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    job = h.submit(name="ddp", resources={"gpus": 1, "nodes": 2})
    h.step()
    j = h.job(job.id)
    assert [b.node_rank for b in j.bindings] == [0, 1]
    zones = {h.instance(b.instance_id).offering.zone for b in j.bindings}
    assert len(zones) == 1
    h.register_all()
    h.report(job, "running", rank=0)
    h.step()
    assert h.job(job.id).state is JobState.BOUND, "running only when every node started"
    h.report(job, "running", rank=1)
    h.step()
    assert h.job(job.id).state is JobState.RUNNING


def test_silent_agent_loses_the_instance_and_requeues_its_job(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    job = h.submit(name="x")
    h.step()
    h.register_all()
    h.report(job, "running")
    h.step()
    (inst,) = h.live()
    h.clock.advance(121)
    h.step()
    assert h.job(job.id).state is JobState.BOUND and h.job(job.id).interruptions == 1
    assert h.instance(inst.id).state is InstanceState.TERMINATED
    assert h.job(job.id).instance_ids != (inst.id,)


def test_unknown_agent_token_is_refused(sqlite_store: Store, tmp_path: Path) -> None:
    from spotfleet.controller.agents import Unauthorized
    from spotfleet.wire import RegisterRequest

    h = make_harness(sqlite_store, tmp_path)
    with pytest.raises(Unauthorized):
        h.controller.agents.register(TOKEN + "nobody", RegisterRequest())


def test_agent_tokens_are_safe_as_argv_and_yaml() -> None:
    import yaml

    from spotfleet.controller.executor import new_agent_token

    for _ in range(500):
        token = new_agent_token()
        assert not token.startswith("-") and len(token) >= 40
        assert yaml.safe_load(f"token: {token}")["token"] == token


def test_only_news_in_a_heartbeat_wakes_the_step(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    wakes: list[int] = []
    h.controller.wake = lambda: wakes.append(1)
    job = h.submit(name="x")
    h.step()
    h.register_all()
    wakes.clear()
    h.report(job, "running")
    assert len(wakes) == 1, "a bound job started: news"
    h.step()
    for _ in range(3):
        h.report(job, "running")
    assert len(wakes) == 1, "a steady heartbeat of a running job is not news"
    h.report(job, "exited", exit_code=0)
    assert len(wakes) == 2, "an exit is news"


def test_a_throttled_launch_waits_for_the_clouds_retry_after(store: Store, tmp_path: Path) -> None:
    from spotfleet.errors import Throttled

    h = make_harness(store, tmp_path)
    h.provider.fail_next_launch(Throttled(retry_after=60))
    h.submit(name="train", resources={"gpus": 1})
    h.step()
    assert len(h.provider.calls_named("launch")) == 1
    [waiting] = store.list_instances(live_only=True)
    assert waiting.state is InstanceState.REQUESTED
    h.clock.advance(30)
    h.step()
    assert len(h.provider.calls_named("launch")) == 1, "no launch before retry_after"
    h.clock.advance(31)
    h.step()
    assert len(h.provider.calls_named("launch")) == 2
    assert h.instance(waiting.id).state is InstanceState.PROVISIONING, "the same request, re-issued"
