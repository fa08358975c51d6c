"""Preemption: checkpoint-drain opportunistic work for urgent jobs, losing the least."""

from __future__ import annotations

from datetime import timedelta

from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Budget, Drain, Launch, Preempt, Terminate
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, binds, instance, job, of_type, offering, running, snapshot


def _od_box(name: str, gpus: int = 8, price: float = 20.0) -> Instance:
    return instance(name, offering("p4d.24xlarge", "A100", gpus, price, gpu_memory_gib=40))


def test_picks_the_victim_that_loses_least_work() -> None:
    box = _od_box("i1")
    stale = running("stale", box, (0, 1, 2, 3), priority="opportunistic", resources={"gpus": 4},
                    checkpoint_at=T0 - timedelta(minutes=30))  # fmt: skip
    fresh = running("fresh", box, (4, 5, 6, 7), priority="opportunistic", resources={"gpus": 4},
                    checkpoint_at=T0 - timedelta(minutes=5))  # fmt: skip
    urgent = job("urgent", priority="critical", resources={"gpus": 4})
    # nothing to buy: no offerings at all
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[stale, fresh, urgent], instances=[box], offerings=[]))
    assert of_type(cmds, Preempt) == [Preempt("fresh", "preempted for urgent (critical)")]


def test_fewest_victims_first() -> None:
    one = _od_box("one")
    two = _od_box("two")
    big = running("big", one, tuple(range(8)), priority="opportunistic", resources={"gpus": 8},
                  checkpoint_at=T0 - timedelta(minutes=20))  # fmt: skip
    smalls = [running(f"s{i}", two, tuple(range(4 * i, 4 * i + 4)), priority="opportunistic",
                      resources={"gpus": 4}, checkpoint_at=T0 - timedelta(minutes=1)) for i in range(2)]  # fmt: skip
    urgent = job("urgent", priority="critical", resources={"gpus": 8})
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[big, *smalls, urgent], instances=[one, two], offerings=[]))
    assert [p.job_id for p in of_type(cmds, Preempt)] == ["big"]


def test_never_preempts_critical_or_non_interruptible_work() -> None:
    box = _od_box("i1")
    pinned = running("pinned", box, tuple(range(8)), priority="opportunistic", interruptible=False,
                     resources={"gpus": 8})  # fmt: skip
    normal = _od_box("i2")
    normal_job = running("n", normal, tuple(range(8)), resources={"gpus": 8})
    urgent = job("urgent", priority="critical", resources={"gpus": 8})
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[pinned, normal_job, urgent], instances=[box, normal], offerings=[]))
    assert not of_type(cmds, Preempt) and not of_type(cmds, Drain)


def test_no_preemption_when_buying_is_possible() -> None:
    box = _od_box("i1")
    victim = running("v", box, tuple(range(8)), priority="opportunistic", resources={"gpus": 8})
    urgent = job("urgent", priority="critical", resources={"gpus": 8})
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[victim, urgent], instances=[box],
                                             offerings=[offering("p4d.24xlarge", "A100", 8, 30.0, gpu_memory_gib=40)]))  # fmt: skip
    assert not of_type(cmds, Preempt)


def test_victims_already_draining_are_waited_for_not_doubled() -> None:
    box = _od_box("i1")
    leaving = running("leaving", box, (0, 1, 2, 3), priority="opportunistic", resources={"gpus": 4},
                      state=JobState.DRAINING)  # fmt: skip
    other = running("other", box, (4, 5, 6, 7), priority="opportunistic", resources={"gpus": 4},
                    checkpoint_at=T0 - timedelta(minutes=1))  # fmt: skip
    urgent = job("urgent", priority="critical", resources={"gpus": 4})
    result = SpotfleetPolicy().plan(snapshot(jobs=[leaving, other, urgent], instances=[box], offerings=[]))
    assert not of_type(result.commands, Preempt)
    assert "waiting for draining" in result.notes["urgent"]


def test_budget_blocked_critical_job_drains_an_opportunistic_spot_instance() -> None:
    spot_box = instance("spot", offering("p4d.24xlarge", "A100", 8, 12.0, gpu_memory_gib=40,
                                         market=Market.SPOT, on_demand=30.0))  # fmt: skip
    victims = [running(f"o{i}", spot_box, (i,), priority="opportunistic") for i in range(2)]
    od = offering("p4d.24xlarge", "A100", 8, 30.0, gpu_memory_gib=40)
    urgent = job("urgent", priority="critical", resources={"gpus": 8})
    # spend $12/h, cap $35/h: the $30/h launch does not fit; draining the spot box frees $12/h
    snap = snapshot(jobs=[*victims, urgent], instances=[spot_box], offerings=[od], budgets=(Budget(35.0),))
    cmds = SpotfleetPolicy().decide(snap)
    drains = of_type(cmds, Drain)
    assert [d.instance_id for d in drains] == ["spot"]
    assert not of_type(cmds, Terminate)


def test_preemption_can_be_switched_off() -> None:
    box = _od_box("i1")
    victim = running("v", box, tuple(range(8)), priority="opportunistic", resources={"gpus": 8})
    urgent = job("urgent", priority="critical", resources={"gpus": 8})
    policy = SpotfleetPolicy(Knobs(preemption_enabled=False))
    assert not of_type(policy.decide(snapshot(jobs=[victim, urgent], instances=[box], offerings=[])), Preempt)


def test_budget_drain_skips_instances_this_plan_just_filled() -> None:
    spot = offering("p4d.24xlarge", "A100", 8, 12.0, gpu_memory_gib=40, market=Market.SPOT, on_demand=30.0)
    busy = instance("busy", spot)
    idle_victims = instance("victims", spot)
    jobs = [
        running("o1", busy, (0,), priority="opportunistic"),
        running("o2", idle_victims, (0,), priority="opportunistic"),
        job("newcomer", resources={"gpus": 7}, created=T0 - timedelta(hours=1)),
    ]  # fits only on a box
    od = offering("p4d.24xlarge", "A100", 8, 30.0, gpu_memory_gib=40)
    urgent = job("urgent", priority="critical", resources={"gpus": 8})
    snap = snapshot(jobs=[*jobs, urgent], instances=[busy, idle_victims], offerings=[od], budgets=(Budget(45.0),))
    cmds = SpotfleetPolicy().decide(snap)
    filled = binds(cmds)["newcomer"].bindings[0].instance_id
    assert [d.instance_id for d in of_type(cmds, Drain)] == [({"busy", "victims"} - {filled}).pop()]


def test_non_interruptible_normal_jobs_stay_off_spot() -> None:
    spot = instance("spot", offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0))
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[job("pinned", interruptible=False)], instances=[spot],
                                             offerings=[offering("g5.xlarge", "A10G", 1, 1.0)]))  # fmt: skip
    assert [lc.offering.market for lc in of_type(cmds, Launch)] == [Market.ON_DEMAND]


def test_a_job_preempted_twice_in_the_last_hour_is_no_longer_a_victim() -> None:
    from spotfleet.model.statemachine import TransitionRecord

    box = _od_box("i1")
    victim = running("v", box, tuple(range(8)), priority="opportunistic", resources={"gpus": 8})
    victim.history = [TransitionRecord("running", "draining", T0 - timedelta(minutes=m), "preempted: for x")
                      for m in (10, 40)]  # fmt: skip
    urgent = job("urgent", priority="critical", resources={"gpus": 8})
    assert not of_type(SpotfleetPolicy().decide(snapshot(jobs=[victim, urgent], instances=[box], offerings=[])),
                       Preempt)  # fmt: skip
    victim.history = victim.history[:1]  # once: still a victim
    assert of_type(SpotfleetPolicy().decide(snapshot(jobs=[victim, urgent], instances=[box], offerings=[])), Preempt)


def test_budget_freed_for_an_urgent_job_is_held_from_lower_tiers() -> None:
    """The livelock of issue 14: instances draining for a critical job still count
    against the cap, so the critical job waits; the requeued victims are planned
    after it and must not re-buy the headroom it is waiting for."""
    spot = offering("p3.2xlarge", "V100", 1, 0.9, market=Market.SPOT, on_demand=3.06)
    od = offering("p3.2xlarge", "V100", 1, 3.06)
    leaving = [instance(f"d{i}", spot, state=InstanceState.DRAINING) for i in range(2)]
    for inst in leaving:
        inst.reserved_for = "urgent"
    draining = [running(f"o{i}", inst, (0,), priority="opportunistic", state=JobState.DRAINING)
                for i, inst in enumerate(leaving)]  # fmt: skip
    requeued = job("o9", priority="opportunistic")  # its instance already left
    urgent = job("urgent", priority="critical")
    snap = snapshot(jobs=[*draining, requeued, urgent], instances=leaving, offerings=[spot, od],
                    budgets=(Budget(3.5),))  # fmt: skip
    result = SpotfleetPolicy().plan(snap)
    assert not of_type(result.commands, Launch), result.outcomes["o9"]
    assert not of_type(result.commands, Drain)  # the room on its way is enough: no new victims


def test_two_budget_blocked_critical_jobs_do_not_block_each_others_preemption() -> None:
    """Shrunk by the invariant suite (tests/controller/test_invariants.py): with
    three critical jobs waiting under a $3.5/h cap, each counted the others'
    budget holds as its own shortfall and nothing was ever preempted."""
    spot = offering("p3.2xlarge", "V100", 1, 0.9, market=Market.SPOT, on_demand=3.06)
    od = offering("p3.2xlarge", "V100", 1, 3.06)
    boxes = [instance(f"s{i}", spot) for i in range(3)]
    victims = [running(f"o{i}", box, (0,), priority="opportunistic") for i, box in enumerate(boxes)]
    urgent = [job(f"urgent{i}", priority="critical", created=T0 - timedelta(minutes=10 - i)) for i in range(3)]
    snap = snapshot(jobs=[*victims, *urgent], instances=boxes, offerings=[spot, od], budgets=(Budget(3.5),))
    result = SpotfleetPolicy().plan(snap)
    drains = of_type(result.commands, Drain)
    assert len(drains) == 3 and {d.for_job for d in drains} == {"urgent0"}, result.notes
