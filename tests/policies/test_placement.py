"""Placement: best fit on existing capacity, gangs, MIG and fractional packing."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from spotfleet.model.events import NoticeKind
from spotfleet.model.instance import InstanceState
from spotfleet.model.job import JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Budget, Launch
from spotfleet.policies.capacity import Cap
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.shape import shape_of
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, binds, instance, job, launches, offering, running, snapshot


def test_best_fit_by_gpus_then_memory() -> None:
    roomy = instance("roomy", offering("p4d.24xlarge", "A100", 8, 30.0, gpu_memory_gib=40))
    tight = instance("tight", offering("p4d.24xlarge", "A100", 8, 30.0, gpu_memory_gib=40))
    big_mem = instance("bigmem", offering("p4de.24xlarge", "A100-80GB", 8, 40.0, gpu_memory_gib=80))
    fillers = [running(f"f{g}", tight, (g,), priority="critical") for g in range(6)]
    fillers += [running(f"m{g}", big_mem, (g,), priority="critical") for g in range(6)]
    snap = snapshot(jobs=[*fillers, job("j", priority="critical", resources={"gpus": 2})],
                    instances=[roomy, tight, big_mem], offerings=[])  # fmt: skip
    cmds = SpotfleetPolicy().decide(snap)
    # tight and bigmem both have exactly 2 free GPUs; tight's GPUs have less memory
    assert binds(cmds)["j"].bindings[0].instance_id == "tight"
    assert binds(cmds)["j"].bindings[0].gpu_indices == (6, 7)
    assert not launches(cmds)


def test_existing_capacity_is_used_before_buying() -> None:
    inst = instance("i1", offering("g5.12xlarge", "A10G", 4, 5.0, gpu_memory_gib=24))
    snap = snapshot(jobs=[job(f"j{i}", priority="critical") for i in range(6)], instances=[inst],
                    offerings=[offering("g5.xlarge", "A10G", 1, 1.0, gpu_memory_gib=24)])  # fmt: skip
    cmds = SpotfleetPolicy().decide(snap)
    on_existing = [b for b in binds(cmds).values() if b.bindings[0].instance_id == "i1"]
    assert len(on_existing) == 4
    assert len(launches(cmds)) == 2


def test_gang_job_never_starts_partially() -> None:
    node = offering("p5.48xlarge", "H100", 8, 10.0, nvlink=True)
    gang = job("g", priority="critical", resources={"gpus": 8, "nodes": 2, "nvlink": True})
    # the budget pays for one node only → nothing at all
    snap = snapshot(jobs=[gang], offerings=[node], budgets=(Budget(15.0),))
    cmds = SpotfleetPolicy().decide(snap)
    assert cmds == []
    # enough for two: both nodes, one zone, one placement group
    snap = snapshot(jobs=[gang], offerings=[node, offering("p5.48xlarge", "H100", 8, 10.5, nvlink=True,
                                                           zone="use1-az2")],
                    budgets=(Budget(25.0),))  # fmt: skip
    cmds = SpotfleetPolicy().decide(snap)
    ls = launches(cmds)
    assert len(ls) == 2 and {lc.offering.zone for lc in ls} == {"use1-az1"}
    assert len({lc.placement_group for lc in ls}) == 1 and ls[0].placement_group
    (b,) = binds(cmds).values()
    assert [x.node_rank for x in b.bindings] == [0, 1]
    assert {x.instance_id for x in b.bindings} == {lc.instance_id for lc in ls}


def test_gang_on_existing_instances_stays_in_one_zone() -> None:
    a1 = instance("a1", offering("p5.48xlarge", "H100", 8, 10.0, zone="use1-az1"))
    b1 = instance("b1", offering("p5.48xlarge", "H100", 8, 10.0, zone="use1-az2"))
    b2 = instance("b2", offering("p5.48xlarge", "H100", 8, 10.0, zone="use1-az2"))
    gang = job("g", priority="critical", resources={"gpus": 8, "nodes": 2})
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[gang], instances=[a1, b1, b2], offerings=[]))
    (b,) = binds(cmds).values()
    assert {x.instance_id for x in b.bindings} == {"b1", "b2"}


def test_mig_packing_never_exceeds_seven_slices() -> None:
    gpu = offering("a2-ultragpu-1g", "A100-80GB", 1, 5.0, gpu_memory_gib=80)
    inst = instance("i1", gpu)
    jobs = [job(f"m{i}", priority="critical", resources={"mig": "3g.40gb"}) for i in range(4)]
    # no offerings to buy: only the one GPU; 3 + 3 = 6 ≤ 7 but 9 > 7
    cmds = SpotfleetPolicy().decide(snapshot(jobs=jobs, instances=[inst], offerings=[]))
    placed = binds(cmds)
    assert len(placed) == 2
    assert all(b.bindings[0].mig_slices == 3 and b.bindings[0].gpu_indices == (0,) for b in placed.values())

    small = [job(f"s{i}", priority="critical", resources={"mig": "1g.10gb"}) for i in range(9)]
    cmds = SpotfleetPolicy().decide(snapshot(jobs=small, instances=[inst], offerings=[]))
    assert sum(b.bindings[0].mig_slices for b in binds(cmds).values()) == 7


def test_mig_packs_onto_a_partly_used_gpu_first() -> None:
    inst = instance("i1", offering("p4de.24xlarge", "A100-80GB", 8, 40.0, gpu_memory_gib=80))
    existing = running("r", inst, (5,), mig_slices=4, priority="critical", resources={"mig": "4g.40gb"})
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[existing, job("m", priority="critical", resources={"mig": "3g.40gb"})],
                                             instances=[inst], offerings=[]))  # fmt: skip
    assert binds(cmds)["m"].bindings[0].gpu_indices == (5,)


def test_mig_jobs_never_land_on_gpus_without_mig() -> None:
    t4 = instance("t4", offering("g4dn.xlarge", "T4", 1, 0.5, gpu_memory_gib=16))
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[job("m", priority="critical", resources={"mig": "1g.5gb"})],
                                             instances=[t4], offerings=[]))  # fmt: skip
    assert not binds(cmds)


def test_fractions_share_a_gpu_up_to_one() -> None:
    inst = instance("i1", offering("g5.xlarge", "A10G", 1, 1.0, gpu_memory_gib=24))
    jobs = [job(f"f{i}", priority="critical", resources={"gpu_fraction": 0.3}) for i in range(4)]
    cmds = SpotfleetPolicy().decide(snapshot(jobs=jobs, instances=[inst], offerings=[]))
    assert len(binds(cmds)) == 3  # 3 × 0.3 = 0.9 ≤ 1 < 1.2


def test_cap_model_respects_slices_memory_and_fractions() -> None:
    f = Forecast()
    three = shape_of(job("a", resources={"mig": "3g.20gb"}).spec, f)
    one = shape_of(job("b", resources={"mig": "1g.5gb"}).spec, f)
    # A100-40GB: two 3g.20gb use all 40 GB, so not even a 1g.5gb fits (as on real MIG)
    cap = Cap("i", offering("a2-highgpu-1g", "A100", 1, 3.0, gpu_memory_gib=40))
    cap.take(three)
    cap.take(three)
    assert not cap.fits(three) and not cap.fits(one)
    # A100-80GB: memory to spare, so compute slices bind: 3 + 3 + 1 = 7, then nothing
    cap = Cap("i", offering("a2-ultragpu-1g", "A100-80GB", 1, 5.0, gpu_memory_gib=80))
    cap.take(three)
    cap.take(three)
    assert not cap.fits(three)  # 6 slices used, 3 more would be 9
    assert cap.fits(one)
    cap.take(one)
    assert not cap.fits(one)  # 7 of 7
    half = shape_of(job("c", resources={"gpu_fraction": 0.5}).spec, f)
    assert not cap.fits(half)  # a MIG GPU is never also time-sliced
    frac = Cap("f", offering("g5.xlarge", "A10G", 1, 1.0, gpu_memory_gib=24))
    frac.take(half)
    frac.take(half)
    assert not frac.fits(half) and frac.exhausted


def test_job_draining_for_a_notice_reserves_replacement_capacity_without_binding() -> None:
    doomed = instance("old", offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0),
                      state=InstanceState.DRAINING)  # fmt: skip
    doomed.notice_kind = NoticeKind.SPOT_INTERRUPTION  # only a notice earns a replacement bought ahead
    leaving = running("d", doomed, (0,), state=JobState.DRAINING)
    spot = offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0, zone="use1-az2")
    snap = snapshot(jobs=[leaving], instances=[doomed], offerings=[spot])
    policy = SpotfleetPolicy()
    result = policy.plan(snap)
    assert [type(c) for c in result.commands] == [Launch]
    assert result.outcomes["d"].status == "reserved"


def test_plan_is_deterministic() -> None:
    offers = [offering("g5.xlarge", "A10G", 1, 1.0 + i / 10, zone=f"use1-az{i}") for i in range(5)]
    jobs = [job(f"j{i}", priority="critical", resources={"gpus": 1}, created=T0) for i in range(20)]
    a = SpotfleetPolicy().decide(snapshot(jobs=jobs, offerings=offers))
    b = SpotfleetPolicy().decide(snapshot(jobs=jobs, offerings=offers))
    assert a == b
    per_instance: dict[str, int] = defaultdict(int)
    for bnd in binds(a).values():
        per_instance[bnd.bindings[0].instance_id] += 1
    assert all(v == 1 for v in per_instance.values())


def test_replacement_is_bought_ahead_of_a_reclaim_and_held_for_its_job() -> None:
    spot = offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0, gpu_memory_gib=24)
    doomed = instance("doomed", spot)
    doomed.notice_kind = NoticeKind.SPOT_INTERRUPTION
    victim = running("v", doomed, (0,))
    other_zone = offering("g5.xlarge", "A10G", 1, 0.32, market=Market.SPOT, on_demand=1.0, gpu_memory_gib=24,
                          zone="use1-az2")  # fmt: skip
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[victim], instances=[doomed], offerings=[spot, other_zone]))
    (launch,) = launches(cmds)
    assert launch.reserved_for == "v" and not binds(cmds)

    # next step: the job checkpointed and is pending; the replacement is provisioning
    repl = instance(launch.instance_id, launch.offering, state=InstanceState.PROVISIONING)
    repl.reserved_for = "v"
    back = job("v", created=T0 - timedelta(hours=2))
    rival = job("rival", created=T0 - timedelta(hours=3))  # older: planned first
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[back, rival], instances=[repl], offerings=[spot, other_zone]))
    assert binds(cmds)["v"].bindings[0].instance_id == repl.id
    assert binds(cmds)["rival"].bindings[0].instance_id != repl.id


def test_an_idle_reserved_replacement_is_not_given_back() -> None:
    spot = offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0, gpu_memory_gib=24)
    old = instance("old", spot, state=InstanceState.DRAINING)
    leaving = running("v", old, (0,), state=JobState.DRAINING)
    repl = instance("repl", spot, idle_since=T0 - timedelta(hours=1))
    repl.reserved_for = "v"
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[leaving], instances=[old, repl], offerings=[spot]))
    assert cmds == []  # held for v: no terminate, and no second replacement
