"""``controller/apply.py`` on its own: the policy proposes, apply disposes.

Every command that would break an invariant is rejected with a reason (and an
event), and nothing of it is applied; the others change the state machines.
"""

from __future__ import annotations

from datetime import timedelta

from spotfleet.controller.apply import apply_commands, spend_rate
from spotfleet.controller.settings import PlanSettings
from spotfleet.controller.step import StepState
from spotfleet.model.instance import InstanceState
from spotfleet.model.job import Binding, JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Bind, Budget, Drain, Launch, Preempt, Snapshot, Terminate
from tests.policies.builders import T0, instance, job, offering, running, snapshot

I = InstanceState  # noqa: E741
J = JobState
FOUR = offering("g5.12xlarge", "A10G", 4, 5.67)
SPOT = offering("g5.xlarge", "A10G", 1, 0.5, market=Market.SPOT, on_demand=1.0)


def step_of(snap: Snapshot) -> StepState:
    return StepState(snapshot=snap, settings=PlanSettings())


def test_a_launch_adds_a_requested_instance_once() -> None:
    step = step_of(snapshot())
    rejected = apply_commands(step, [Launch("i-new", SPOT, reason="for j1"), Launch("i-new", SPOT, reason="again")])
    assert step.snapshot.instances["i-new"].state is I.REQUESTED
    assert set(step.new_instances) == {"i-new"}
    assert [r.reason for r in rejected] == ["instance id i-new already exists"]
    assert [e.kind for e in step.changes.events] == ["instance.requested", "plan.rejected"]


def test_launches_stop_at_the_global_budget() -> None:
    live = instance("i1", FOUR)
    step = step_of(snapshot(instances=[live], budgets=(Budget(6.5),)))
    rejected = apply_commands(step, [Launch("a", SPOT, reason="x"), Launch("b", SPOT, reason="y")])
    assert "a" in step.snapshot.instances and "b" not in step.snapshot.instances
    assert len(rejected) == 1 and "global budget $6.50/h would be exceeded ($6.67/h)" in rejected[0].reason
    assert step.spend_rate == 5.67 + 0.5


def test_spend_rate_counts_paid_instances_only() -> None:
    terminating, gone = instance("i2", FOUR, state=I.TERMINATING), instance("i3", FOUR, state=I.TERMINATED)
    assert spend_rate([instance("i1", SPOT), terminating, gone]) == 0.5


def test_bind_checks_state_gang_schedulability_and_gpus() -> None:
    box = instance("i1", FOUR)
    cordoned = instance("i2", FOUR)
    cordoned.cordoned = True
    single, gang, busy = job("j1"), job("g", resources={"gpus": 1, "nodes": 2}), job("j3", state=J.RUNNING)
    step = step_of(snapshot(jobs=[single, gang, busy], instances=[box, cordoned]))
    rejected = apply_commands(step, [
        Bind("j3", (Binding(0, "i1", (0,)),), reason="x"),
        Bind("g", (Binding(0, "i1", (1,)),), reason="half a gang"),
        Bind("j1", (Binding(0, "i2", (0,)),), reason="cordoned"),
        Bind("j1", (Binding(0, "i1", (0, 1)),), reason="too many GPUs"),
        Bind("j1", (Binding(0, "i1", (0,)),), reason="fits"),
    ])  # fmt: skip
    assert [r.reason for r in rejected] == [
        "job j3 is not pending",
        "job g needs 2 nodes, got 1 (gang: all or none)",
        "instance i2 is not schedulable",
        "job j1 needs 1 GPUs per node, binding has 2",
    ]
    assert single.state is J.BOUND and single.attempt == 2 and single.bindings == (Binding(0, "i1", (0,)),)
    assert gang.state is J.PENDING


def test_two_binds_cannot_share_a_gpu() -> None:
    box = instance("i1", FOUR)
    a, b = job("a"), job("b")
    step = step_of(snapshot(jobs=[a, b], instances=[box]))
    rejected = apply_commands(step, [Bind("a", (Binding(0, "i1", (0,)),), reason="x"),
                                     Bind("b", (Binding(0, "i1", (0,)),), reason="y")])  # fmt: skip
    assert a.state is J.BOUND and b.state is J.PENDING
    assert len(rejected) == 1


def test_terminate_refuses_a_busy_instance_and_cancels_a_request() -> None:
    busy, requested, idle = instance("i1", FOUR), instance("i2", SPOT, state=I.REQUESTED), instance("i3", SPOT)
    j = running("j1", busy, (0,))
    step = step_of(snapshot(jobs=[j], instances=[busy, requested, idle]))
    rejected = apply_commands(step, [Terminate("i1", reason="x"), Terminate("i2", reason="y"),
                                     Terminate("i3", reason="z"), Terminate("i3", reason="again")])  # fmt: skip
    assert [r.reason for r in rejected] == ["instance i1 still runs j1; drain it first", "instance i3 is not live"]
    assert (busy.state, requested.state, idle.state) == (I.RUNNING, I.FAILED, I.TERMINATING)


def test_drain_refuses_non_interruptible_work_unless_the_cloud_asks() -> None:
    box = instance("i1", FOUR)
    critical = running("j1", box, (0,), priority="critical")
    step = step_of(snapshot(jobs=[critical], instances=[box]))
    [refused] = apply_commands(step, [Drain("i1", reason="consolidate")])
    assert "non-interruptible j1" in refused.reason and box.state is I.RUNNING


def test_drain_cordons_and_gives_jobs_the_grace_period() -> None:
    box = instance("i1", FOUR)
    j = running("j1", box, (0,))
    step = step_of(snapshot(jobs=[j], instances=[box]))
    assert apply_commands(step, [Drain("i1", reason="move to cheaper capacity")]) == []
    assert box.state is I.DRAINING and box.cordoned
    assert j.state is J.DRAINING and j.drain_deadline == T0 + timedelta(minutes=2)


def test_preempt_only_running_interruptible_jobs() -> None:
    box = instance("i1", FOUR)
    victim, critical, waiting = running("v", box, (0,)), running("c", box, (1,), priority="critical"), job("w")
    step = step_of(snapshot(jobs=[victim, critical, waiting], instances=[box]))
    rejected = apply_commands(step, [Preempt("v", reason="room for c"), Preempt("c", reason="x"),
                                     Preempt("w", reason="y")])  # fmt: skip
    assert [r.reason for r in rejected] == ["job c is not interruptible", "job w is not running"]
    assert victim.state is J.DRAINING and victim.drain_deadline == T0 + timedelta(minutes=2)
