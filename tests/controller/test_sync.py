"""``controller/sync.py`` on its own: observed facts → state machines, no store, no clock.

Each test builds a snapshot, feeds one kind of fact (a cancel, a notice, a
provider listing, agent presence, a node report) and checks the transitions
and the events the step recorded. The controller tests cover the same paths
end to end; these pin down each rule where it is written.
"""

from __future__ import annotations

from datetime import timedelta

from spotfleet.checkpoint import CHECKPOINTED_EXIT_CODE
from spotfleet.controller.settings import PlanSettings
from spotfleet.controller.step import StepState
from spotfleet.controller.sync import (
    Observation,
    apply_cancels,
    apply_listing,
    apply_notices,
    apply_presence,
    apply_reports,
    sync,
    update_idle,
)
from spotfleet.model.changes import PendingNotice
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Binding, Job, JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import AgentPresence, NodeReport, Snapshot
from spotfleet.providers.base import TAG_CLUSTER, TAG_REQUEST_ID, CloudState, ProviderInstance
from tests.policies.builders import T0, instance, job, offering, running, snapshot

I = InstanceState  # noqa: E741
J = JobState
SETTINGS = PlanSettings()
SPOT = offering("g5.xlarge", "A10G", 1, 0.5, market=Market.SPOT, on_demand=1.0)
ON_DEMAND = offering("g5.xlarge", "A10G", 1, 1.0)


def step_of(snap: Snapshot) -> StepState:
    return StepState(snapshot=snap, settings=SETTINGS)


def on(inst_id: str, o: object = SPOT, *, state: InstanceState = I.RUNNING, pid: str | None = None) -> Instance:
    inst = instance(inst_id, o, state=state)  # type: ignore[arg-type]
    inst.provider_id = pid or f"pid-{inst_id}"
    inst.launched_at = T0 - timedelta(hours=1)
    return inst


def notice(inst: Instance, kind: NoticeKind, *, n: int = 1, in_s: float | None = 120) -> PendingNotice:
    deadline = T0 + timedelta(seconds=in_s) if in_s is not None else None
    return PendingNotice(n, InstanceEvent(inst.provider, inst.provider_id or "", kind, T0, deadline, source="test"))


def kinds(step: StepState) -> list[str]:
    return [e.kind for e in step.changes.events]


# ---------------------------------------------------------------- cancels


def test_a_cancel_request_ends_the_job_and_its_attempt() -> None:
    inst = on("i1")
    j = running("j1", inst, (0,))
    j.cancel_requested = True
    done = job("j2", state=J.SUCCEEDED)
    done.cancel_requested = True
    step = step_of(snapshot(jobs=[j, done], instances=[inst]))
    apply_cancels(step)
    assert j.state is J.CANCELLED and j.bindings == ()
    assert [(a.job_id, a.outcome) for a in step.changes.attempts_ended] == [("j1", "cancelled")]
    assert done.state is J.SUCCEEDED, "a finished job stays finished"


# ---------------------------------------------------------------- notices


def test_a_spot_notice_drains_the_instance_its_jobs_and_avoids_the_pool() -> None:
    inst = on("i1")
    run, bound = running("j1", inst, (0,)), job("j2", state=J.BOUND, bindings=(Binding(0, "i1", (0,)),))
    step = step_of(snapshot(jobs=[run, bound], instances=[inst]))
    apply_notices(step, [notice(inst, NoticeKind.SPOT_INTERRUPTION)])
    assert inst.state is I.DRAINING and inst.cordoned and inst.notice_deadline == T0 + timedelta(seconds=120)
    assert run.state is J.DRAINING and run.drain_deadline == T0 + timedelta(seconds=120)
    assert bound.state is J.PENDING, "a job that had not started is simply placed again"
    assert step.snapshot.unavailable[SPOT.key] == T0 + SETTINGS.interrupted_backoff
    assert step.changes.notices_processed == [1]


def test_a_duplicate_notice_changes_nothing() -> None:
    inst = on("i1")
    run = running("j1", inst, (0,))
    step = step_of(snapshot(jobs=[run], instances=[inst]))
    apply_notices(step, [notice(inst, NoticeKind.SPOT_INTERRUPTION, n=1)])
    events = len(step.changes.events)
    apply_notices(step, [notice(inst, NoticeKind.SPOT_INTERRUPTION, n=2)])
    assert len(step.changes.events) == events
    assert step.changes.notices_processed == [1, 2], "both are marked processed"


def test_a_soft_notice_only_cordons() -> None:
    inst = on("i1")
    run = running("j1", inst, (0,))
    step = step_of(snapshot(jobs=[run], instances=[inst]))
    apply_notices(step, [notice(inst, NoticeKind.REBALANCE, in_s=None)])
    assert inst.state is I.RUNNING and inst.cordoned and not inst.schedulable
    assert run.state is J.RUNNING
    assert "instance.cordoned" in kinds(step)


def test_terminated_loses_the_instance_and_requeues_from_the_checkpoint() -> None:
    inst = on("i1")
    run = running("j1", inst, (0,))
    step = step_of(snapshot(jobs=[run], instances=[inst]))
    apply_notices(step, [notice(inst, NoticeKind.TERMINATED, in_s=None)])
    assert inst.state is I.TERMINATED
    assert run.state is J.PENDING and run.interruptions == 1
    assert [a.outcome for a in step.changes.attempts_ended] == ["lost"]


def test_a_lost_instance_rolls_the_jobs_progress_back_to_its_checkpoint() -> None:
    """The work since the checkpoint is gone: the slack the deadline rules read
    must not count it until the resumed attempt reports (issue 12)."""
    from spotfleet.model.job import Checkpoint

    inst = on("i1")
    run = running("j1", inst, (0,))
    run.checkpoint = Checkpoint("s3://c/600", 600, T0 - timedelta(minutes=20), 1)
    run.progress = {"step": 1000, "fraction": 0.5}
    step = step_of(snapshot(jobs=[run], instances=[inst]))
    apply_notices(step, [notice(inst, NoticeKind.TERMINATED, in_s=None)])
    assert run.state is J.PENDING and run.progress == {"step": 600, "fraction": 0.3}
    (ended,) = [e for e in step.changes.events if e.kind == "job.pending"]
    assert "progress rolled back from step 1000 to the checkpoint's 600" in ended.message


def test_a_checkpointed_exit_keeps_the_progress_it_saved() -> None:
    from spotfleet.model.job import Checkpoint

    inst = on("i1")
    j = running("j1", inst, (0,))
    saved = Checkpoint("s3://c/1000", 1000, T0, 1)
    step = with_reports(j, inst, reported(j, "exited", code=CHECKPOINTED_EXIT_CODE, progress={"step": 1000},
                                          checkpoint=saved))  # fmt: skip
    apply_reports(step)
    assert j.state is J.PENDING and j.progress == {"step": 1000}
    assert not any("rolled back" in e.message for e in step.changes.events)


def test_a_notice_for_an_unknown_or_dead_instance_is_dropped() -> None:
    gone = on("i1", state=I.TERMINATED)
    stranger = on("i2")
    step = step_of(snapshot(instances=[gone]))
    apply_notices(step, [notice(gone, NoticeKind.SPOT_INTERRUPTION, n=1), notice(stranger, NoticeKind.TERMINATED, n=2)])
    assert gone.state is I.TERMINATED and step.changes.events == []
    assert step.changes.notices_processed == [1, 2]


# ---------------------------------------------------------------- listing


def cloud(inst: Instance, state: CloudState = CloudState.RUNNING, *, request_id: str | None = None) -> ProviderInstance:
    rid = request_id or inst.request_id
    return ProviderInstance(
        provider=inst.provider, provider_id=inst.provider_id or f"pid-{rid}", instance_type=inst.offering.instance_type,
        region=inst.offering.region, zone=inst.offering.zone, market=inst.market, state=state,
        tags={TAG_CLUSTER: "c", TAG_REQUEST_ID: rid}, launched_at=T0 - timedelta(minutes=5), address="10.0.0.7",
    )  # fmt: skip


def test_a_requested_instance_found_by_its_request_id_is_adopted() -> None:
    inst = on("i1", state=I.REQUESTED, pid="")
    inst.provider_id = None
    step = step_of(snapshot(instances=[inst]))
    found = cloud(inst)
    orphans = apply_listing(step, {inst.provider: [found]})
    assert orphans == []
    assert inst.state is I.PROVISIONING and inst.provider_id == found.provider_id and inst.address == "10.0.0.7"


def test_a_request_never_confirmed_fails_after_the_timeout() -> None:
    inst = on("i1", state=I.REQUESTED)
    inst.created_at = T0 - SETTINGS.request_timeout - timedelta(seconds=1)
    fresh = on("i2", state=I.REQUESTED)
    fresh.created_at = T0 - timedelta(seconds=5)
    step = step_of(snapshot(instances=[inst, fresh]))
    apply_listing(step, {inst.provider: []})
    assert inst.state is I.FAILED
    assert fresh.state is I.REQUESTED


def test_a_missing_instance_is_lost_only_after_the_vanish_grace() -> None:
    old, new = on("i1"), on("i2")
    new.launched_at = T0 - SETTINGS.vanish_grace + timedelta(seconds=10)
    run = running("j1", old, (0,))
    step = step_of(snapshot(jobs=[run], instances=[old, new]))
    apply_listing(step, {old.provider: []})
    assert old.state is I.TERMINATED and run.state is J.PENDING
    assert new.state is I.RUNNING, "too new to be missing: listings are eventually consistent"


def test_a_provider_not_listed_proves_nothing() -> None:
    inst = on("i1")
    step = step_of(snapshot(instances=[inst]))
    sync(step, Observation(listed={}))
    assert inst.state is I.RUNNING


def test_an_unknown_instance_with_our_tag_is_returned_as_leaked() -> None:
    inst = on("i1")
    leaked = cloud(inst, request_id="req-nobody-knows")
    gone = cloud(inst, CloudState.TERMINATED, request_id="req-already-gone")
    step = step_of(snapshot(instances=[inst]))
    orphans = apply_listing(step, {inst.provider: [cloud(inst), leaked, gone]})
    assert orphans == [leaked]


# ---------------------------------------------------------------- presence


def test_registration_makes_a_provisioning_instance_running() -> None:
    inst = on("i1", state=I.PROVISIONING)
    snap = snapshot(instances=[inst])
    snap.presence["i1"] = AgentPresence("i1", T0, T0)
    step = step_of(snap)
    apply_presence(step)
    assert inst.state is I.RUNNING


def test_an_agent_that_never_registers_is_given_up_after_the_boot_timeout() -> None:
    inst = on("i1", state=I.PROVISIONING)
    inst.launched_at = T0 - SETTINGS.boot_timeout - timedelta(seconds=1)
    bound = job("j1", state=J.BOUND, bindings=(Binding(0, "i1", (0,)),))
    step = step_of(snapshot(jobs=[bound], instances=[inst]))
    apply_presence(step)
    assert inst.state is I.TERMINATING
    assert bound.state is J.PENDING


def test_a_silent_agent_loses_its_jobs_to_the_queue() -> None:
    inst = on("i1")
    run = running("j1", inst, (0,))
    snap = snapshot(jobs=[run], instances=[inst])
    snap.presence["i1"] = AgentPresence("i1", T0 - timedelta(hours=1), T0 - SETTINGS.agent_timeout - timedelta(1))
    step = step_of(snap)
    apply_presence(step)
    assert inst.state is I.TERMINATING
    assert run.state is J.PENDING and run.interruptions == 1


# ---------------------------------------------------------------- reports


def reported(j: Job, status: str, *, code: int | None = None, rank: int = 0, **kw: object) -> NodeReport:
    inst_id = next(b.instance_id for b in j.bindings if b.node_rank == rank)
    return NodeReport(j.id, j.attempt, rank, inst_id, status, exit_code=code, **kw)  # type: ignore[arg-type]


def with_reports(j: Job, inst: Instance, *reports: NodeReport) -> StepState:
    snap = snapshot(jobs=[j], instances=[inst])
    for r in reports:
        snap.reports[(r.job_id, r.attempt, r.node_rank)] = r
    return step_of(snap)


def test_a_started_report_makes_a_bound_job_running() -> None:
    inst = on("i1")
    j = job("j1", state=J.BOUND, bindings=(Binding(0, "i1", (0,)),))
    step = with_reports(j, inst, reported(j, "started"))
    apply_reports(step)
    assert j.state is J.RUNNING
    assert [(a.job_id, a.attempt) for a in step.changes.attempts_running] == [("j1", 1)]


def test_exit_zero_on_every_node_succeeds_but_not_before() -> None:
    a, b = on("i1"), on("i2")
    gang = job("g", state=J.RUNNING, bindings=(Binding(0, "i1", (0,)), Binding(1, "i2", (0,))),
               resources={"gpus": 1, "nodes": 2})  # fmt: skip
    snap = snapshot(jobs=[gang], instances=[a, b])
    snap.reports[("g", 1, 0)] = reported(gang, "exited", code=0, rank=0)
    snap.reports[("g", 1, 1)] = reported(gang, "running", rank=1)
    apply_reports(step_of(snap))
    assert gang.state is J.RUNNING, "one node done is not the job done"
    snap.reports[("g", 1, 1)] = reported(gang, "exited", code=0, rank=1)
    apply_reports(step_of(snap))
    assert gang.state is J.SUCCEEDED and gang.exit_code == 0


def test_the_checkpointed_exit_code_requeues_without_counting_a_failure() -> None:
    inst = on("i1")
    j = running("j1", inst, (0,))
    step = with_reports(j, inst, reported(j, "exited", code=CHECKPOINTED_EXIT_CODE))
    apply_reports(step)
    assert j.state is J.PENDING and j.failures == 0
    assert [a.outcome for a in step.changes.attempts_ended] == ["checkpointed"]


def test_a_failure_is_retried_until_max_retries_then_fails() -> None:
    inst = on("i1")
    j = running("j1", inst, (0,), max_retries=1)
    apply_reports(with_reports(j, inst, reported(j, "exited", code=3)))
    assert j.state is J.PENDING and j.failures == 1
    j.attempt, j.bindings = 2, (Binding(0, "i1", (0,)),)
    j.transition(J.BOUND, at=T0, reason="test")
    apply_reports(with_reports(j, inst, reported(j, "exited", code=3)))
    assert j.state is J.FAILED and j.failures == 2 and j.exit_code == 3


def test_a_kill_while_draining_resumes_instead_of_failing() -> None:
    inst = on("i1")
    j = running("j1", inst, (0,))
    j.transition(J.DRAINING, at=T0, reason="test")
    apply_reports(with_reports(j, inst, reported(j, "exited", code=-9)))
    assert j.state is J.PENDING and j.failures == 0 and j.interruptions == 1


def test_reports_of_an_older_attempt_are_ignored() -> None:
    inst = on("i1")
    j = running("j1", inst, (0,), attempt=2)
    stale = NodeReport("j1", 1, 0, "i1", "exited", exit_code=3)
    apply_reports(with_reports(j, inst, stale))
    assert j.state is J.RUNNING and j.failures == 0


def test_only_rank_zero_reports_progress_and_the_newest_checkpoint_wins() -> None:
    from spotfleet.model.job import Checkpoint

    a = on("i1")
    b = on("i2", offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, region="us-west-2", zone="usw2-az1"))
    gang = job("g", state=J.RUNNING, bindings=(Binding(0, "i1", (0,)), Binding(1, "i2", (0,))),
               resources={"gpus": 1, "nodes": 2})  # fmt: skip
    snap = snapshot(jobs=[gang], instances=[a, b])
    newer = Checkpoint("s3://c/2", 200, T0, 1)
    snap.reports[("g", 1, 0)] = reported(gang, "running", rank=0, progress={"step": 10},
                                         checkpoint=Checkpoint("s3://c/1", 100, T0 - timedelta(minutes=5), 1))  # fmt: skip
    snap.reports[("g", 1, 1)] = reported(gang, "running", rank=1, progress={"step": 99}, checkpoint=newer)
    apply_reports(step_of(snap))
    assert gang.progress == {"step": 10}
    # the newest, stamped with where it was written (the reporting node's instance): resuming it
    # in another region moves it
    assert (gang.checkpoint.path, gang.checkpoint.step) == ("s3://c/2", 200)
    assert (gang.checkpoint.provider, gang.checkpoint.region) == ("aws", "us-west-2")


def test_a_checkpoints_location_survives_the_store_and_older_records_load_without_one() -> None:
    from spotfleet.model.job import Checkpoint

    stamped = Checkpoint("s3://c/2", 200, T0, 1, "gcp", "us-central1")
    assert Checkpoint.from_dict(stamped.to_dict()) == stamped
    old = {"path": "s3://c/1", "step": 100, "at": T0.isoformat(), "attempt": 1}  # written before the location
    assert Checkpoint.from_dict(old) == Checkpoint("s3://c/1", 100, T0, 1) and Checkpoint.from_dict(old).region is None


def test_a_refusal_requeues_and_a_stop_fails_with_the_agents_reason() -> None:
    inst = on("i1")
    refused = running("j1", inst, (0,))
    apply_reports(with_reports(refused, inst, reported(refused, "refused", message="no 1g.5gb MIG device")))
    assert refused.state is J.PENDING and refused.failures == 0
    stopped = running("j2", inst, (0,))
    apply_reports(with_reports(stopped, inst, reported(stopped, "exited", code=137, message="over its memory share")))
    assert stopped.state is J.FAILED and "over its memory share" in stopped.history[-1].reason


# ---------------------------------------------------------------- idle


def test_idle_since_is_set_when_empty_and_cleared_when_busy() -> None:
    busy, empty = on("i1"), on("i2")
    busy.idle_since = T0 - timedelta(minutes=3)
    j = running("j1", busy, (0,))
    step = step_of(snapshot(jobs=[j], instances=[busy, empty]))
    update_idle(step)
    assert busy.idle_since is None
    assert empty.idle_since == T0
    assert {"i1", "i2"} <= set(step.changed_instances)


def test_sync_runs_every_stage_in_order() -> None:
    """A cancel and a notice in one step: the cancel wins (the job is not drained)."""
    inst = on("i1")
    j = running("j1", inst, (0,))
    j.cancel_requested = True
    step = step_of(snapshot(jobs=[j], instances=[inst]))
    sync(step, Observation(listed={inst.provider: [cloud(inst)]}, notices=[notice(inst, NoticeKind.SPOT_INTERRUPTION)]))
    assert j.state is J.CANCELLED
    assert inst.state is I.DRAINING and inst.idle_since == T0
