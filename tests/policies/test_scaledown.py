"""Scale-down: emptiness → consolidation, first that yields wins, injectable."""

from __future__ import annotations

from datetime import timedelta

from spotfleet.model.instance import InstanceState
from spotfleet.model.snapshot import Command, Drain, Terminate
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.scaledown import ScaleDownContext, consolidation, emptiness
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, instance, job, of_type, offering, running, snapshot

A10G = offering("g5.xlarge", "A10G", 1, 1.0, gpu_memory_gib=24)
BIG = offering("g5.12xlarge", "A10G", 4, 5.0, gpu_memory_gib=24)


def test_emptiness_terminates_instances_idle_past_the_ttl() -> None:
    old = instance("old", A10G, idle_since=T0 - timedelta(minutes=6))
    young = instance("young", A10G, idle_since=T0 - timedelta(minutes=4))
    unknown = instance("unknown", A10G)
    cmds = SpotfleetPolicy().decide(snapshot(instances=[old, young, unknown], offerings=[A10G]))
    assert [c.instance_id for c in of_type(cmds, Terminate)] == ["old"]


def test_idle_instance_is_reused_not_terminated() -> None:
    old = instance("old", A10G, idle_since=T0 - timedelta(hours=1))
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[job("j", priority="critical")], instances=[old], offerings=[A10G]))
    assert not of_type(cmds, Terminate)


def test_never_terminates_an_instance_with_a_non_interruptible_job() -> None:
    inst = instance("i", A10G, idle_since=T0 - timedelta(hours=1))
    pinned = running("p", inst, (0,), priority="critical")
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[pinned], instances=[inst], offerings=[A10G]))
    assert not of_type(cmds, Terminate) and not of_type(cmds, Drain)


def test_consolidation_moves_interruptible_jobs_off_an_underused_instance() -> None:
    big = instance("big", BIG)  # 1 of 4 GPUs used, $5/h
    lonely = running("lonely", big, (0,), checkpoint_at=T0 - timedelta(minutes=10))
    small = instance("small", BIG)
    others = [running(f"o{g}", small, (g,)) for g in range(2)]  # 2 free GPUs here
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[lonely, *others], instances=[big, small], offerings=[BIG]))
    # savings $5/h; disruption = (10 min lost + 10 min restart) × $1.25/h share = $0.42 → ratio 12/h ≥ 1
    drains = of_type(cmds, Drain)
    assert [d.instance_id for d in drains] == ["big"]  # the least used of the two $5/h boxes
    assert "consolidation" in drains[0].reason


def test_consolidation_never_moves_non_interruptible_jobs() -> None:
    big = instance("big", BIG)
    pinned = running("pinned", big, (0,), interruptible=False)
    small = instance("small", BIG)
    other = running("o", small, (0, 1), resources={"gpus": 2}, priority="critical")
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[pinned, other], instances=[big, small], offerings=[BIG]))
    assert not of_type(cmds, Drain)


def test_consolidation_respects_the_threshold_and_the_disruption_budget() -> None:
    boxes = [instance(f"b{i}", BIG) for i in range(4)]
    jobs = [running(f"j{i}", boxes[i], (0,), checkpoint_at=T0 - timedelta(minutes=1)) for i in range(4)]
    snap = snapshot(jobs=jobs, instances=boxes, offerings=[BIG])
    # 4 live instances × 10 % → budget of 1 (the minimum)
    assert len(of_type(SpotfleetPolicy().decide(snap), Drain)) == 1
    # with a budget of 50 % two may go (the other two receive their jobs)
    assert len(of_type(SpotfleetPolicy(Knobs(disruption_budget_fraction=0.5)).decide(snap), Drain)) == 2
    # an instance already draining uses up the budget
    boxes[3].transition(InstanceState.DRAINING, at=T0)
    assert not of_type(SpotfleetPolicy().decide(snap), Drain)
    # a threshold no move can meet
    boxes[3].state = InstanceState.RUNNING
    assert not of_type(SpotfleetPolicy(Knobs(consolidation_threshold_per_h=1e6)).decide(snap), Drain)


def test_first_method_that_yields_wins_and_the_list_is_injectable() -> None:
    empty = instance("empty", A10G, idle_since=T0 - timedelta(hours=1))
    big = instance("big", BIG)
    lonely = running("lonely", big, (0,))
    small = instance("small", BIG)
    others = [running(f"o{g}", small, (g,)) for g in range(2)]
    snap = snapshot(jobs=[lonely, *others], instances=[empty, big, small], offerings=[BIG])
    result = SpotfleetPolicy().plan(snap)
    assert result.scale_down_method == "emptiness"
    assert not of_type(result.commands, Drain)
    # consolidation only
    result = SpotfleetPolicy(methods=[consolidation]).plan(snap)
    assert result.scale_down_method == "consolidation" and of_type(result.commands, Drain)
    assert not of_type(result.commands, Terminate)

    calls: list[str] = []

    def never(ctx: ScaleDownContext) -> list[Command]:
        calls.append("never")
        return []

    result = SpotfleetPolicy(methods=[never, emptiness]).plan(snap)
    assert calls == ["never"] and result.scale_down_method == "emptiness"


def test_replacement_moves_a_lone_small_job_off_a_big_box_onto_a_cheaper_one_that_fits() -> None:
    from spotfleet.policies.scaledown import replacement

    box = offering("g5.12xlarge", "A10G", 4, 2.08, gpu_memory_gib=24)
    small = offering("g5.xlarge", "A10G", 1, 0.43, gpu_memory_gib=24)
    big = instance("big", box)
    lonely = running("lonely", big, (0,), checkpoint_at=T0 - timedelta(minutes=10))
    snap = snapshot(jobs=[lonely], instances=[big], offerings=[box, small])
    result = SpotfleetPolicy().plan(snap)
    # savings $1.65/h; disruption = (10 min lost + 10 min restart) × $2.08 + 10 min × $0.43 = $0.77 → 2.1/h ≥ 1
    assert result.scale_down_method == "replacement"
    (drain,) = of_type(result.commands, Drain)
    assert drain.instance_id == "big" and "replace: g5.xlarge" in drain.reason
    # nothing cheaper fits: no replacement
    assert (
        SpotfleetPolicy(methods=[replacement]).decide(snapshot(jobs=[lonely], instances=[big], offerings=[box])) == []
    )
    # a high bar (threshold) keeps it
    strict = SpotfleetPolicy(Knobs(consolidation_threshold_per_h=5.0), methods=[replacement])
    assert not of_type(strict.decide(snap), Drain)
