"""Packing against declared MIG layouts, and keeping MIG jobs off instance types
whose agents said they cannot provide them (controller/partitions.py annotates)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotfleet.controller.partitions import annotate, annotate_offering
from spotfleet.model.partition import PartitionPolicy, parse_mig_layout
from spotfleet.model.snapshot import AgentPresence
from spotfleet.policies.explain import explain_job
from spotfleet.policies.spotfleet import SpotfleetPolicy
from tests.policies.builders import T0, binds, instance, job, launches, offering, running, snapshot

SEVEN_SMALL = PartitionPolicy(mig_layouts={"a100": parse_mig_layout("7x1g.5gb")})


def a100(gpus: int = 1, price: float = 4.0, **kw: object) -> object:
    return offering("p4d.24xlarge" if gpus == 8 else "a2-highgpu-1g", "A100", gpus, price, gpu_memory_gib=40, **kw)  # type: ignore[arg-type]


def test_a_declared_layout_decides_how_many_fit_not_the_slice_count() -> None:
    # 7x1g.5gb: seven 1g.5gb jobs fit one GPU; without a layout, 3g.20gb jobs would pack 2 by slices
    inst = instance("i1", annotate_offering(a100(), SEVEN_SMALL, {}))  # type: ignore[arg-type]
    small = [job(f"s{i}", priority="critical", resources={"mig": "1g.5gb"}) for i in range(9)]
    cmds = SpotfleetPolicy().decide(snapshot(jobs=small, instances=[inst], offerings=[]))
    assert len(binds(cmds)) == 7 and all(b.bindings[0].gpu_indices == (0,) for b in binds(cmds).values())
    big = job("b", priority="critical", resources={"mig": "3g.20gb"})
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[big], instances=[inst], offerings=[]))
    assert not binds(cmds)  # the GPU is cut into 1g.5gb devices: no 3g.20gb to hand out


def test_existing_mig_jobs_use_up_layout_devices() -> None:
    layout = PartitionPolicy(mig_layouts={"a2-highgpu-1g": parse_mig_layout("3g.20gb+2x2g.10gb")})
    inst = instance("i1", annotate_offering(a100(), layout, {}))  # type: ignore[arg-type]
    held = running("r", inst, (0,), mig_slices=2, priority="critical", resources={"mig": "2g.10gb"})
    jobs = [held, *(job(f"m{i}", priority="critical", resources={"mig": "2g.10gb"}) for i in range(3))]
    cmds = SpotfleetPolicy().decide(snapshot(jobs=jobs, instances=[inst], offerings=[]))
    assert len(binds(cmds)) == 1  # two 2g.10gb devices, one already held


def test_new_capacity_is_bought_for_the_layout_and_whole_gpu_jobs_stay_off_it() -> None:
    plain = [a100(8, 30.0), offering("g6e.12xlarge", "L40S", 4, 100.0, gpu_memory_gib=48)]
    whole = job("whole", priority="critical", resources={"gpus": 1})
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[whole], offerings=plain))  # type: ignore[list-item]
    assert launches(cmds)[0].offering.instance_type == "p4d.24xlarge"  # without a layout the A100 is best
    offers = [annotate_offering(o, SEVEN_SMALL, {}) for o in plain]  # type: ignore[arg-type]
    jobs = [job(f"s{i}", priority="critical", resources={"mig": "1g.5gb"}) for i in range(10)]
    cmds = SpotfleetPolicy().decide(snapshot(jobs=[*jobs, whole], offerings=offers))
    by_type = {lc.instance_id: lc.offering.instance_type for lc in launches(cmds)}
    placed = binds(cmds)
    assert {by_type[placed[f"s{i}"].bindings[0].instance_id] for i in range(10)} == {"p4d.24xlarge"}
    gpus = [placed[f"s{i}"].bindings[0].gpu_indices[0] for i in range(10)]
    assert sorted(gpus.count(g) for g in set(gpus)) == [3, 7]  # 7 per GPU, the layout's count
    assert by_type[placed["whole"].bindings[0].instance_id] == "g6e.12xlarge"  # A100s are cut into MIG devices
    reasons = {g.reason for g in explain_job(snapshot(jobs=[whole], offerings=offers), "whole").rejected}
    assert "GPUs cut into MIG devices (7x1g.5gb): no whole GPU or fraction" in reasons


def test_an_unfit_instance_type_takes_no_mig_job_and_explain_says_why() -> None:
    o = a100()
    unfit_inst = instance("i1", o)  # type: ignore[arg-type]
    presence = {"i1": AgentPresence("i1", T0, T0, mig_unfit=(("*", "MIG mode is off on GPU 0"),))}
    other = offering("a2-ultragpu-1g", "A100-80GB", 1, 6.0, gpu_memory_gib=80)
    snap = snapshot(jobs=[job("m", priority="critical", resources={"mig": "1g.10gb"})], instances=[unfit_inst],
                    offerings=[o, other], presence=presence)  # type: ignore[list-item]  # fmt: skip
    snap.offerings = annotate(snap.offerings, snap.instances, snap.presence, PartitionPolicy())
    cmds = SpotfleetPolicy().decide(snap)
    (lc,) = launches(cmds)
    assert lc.offering.instance_type == "a2-ultragpu-1g"  # neither the unfit instance nor another of its type
    rejected = {g.reason for g in explain_job(snap, "m").rejected}
    assert any("MIG unfit: MIG mode is off on GPU 0 (reported by i1)" in r for r in rejected)


def test_a_layout_too_big_for_the_gpu_marks_the_pool_unfit() -> None:
    policy = PartitionPolicy(mig_layouts={"a100": parse_mig_layout("7x1g.10gb")})  # 70 GB on a 40 GB A100
    annotated = annotate_offering(a100(), policy, {})  # type: ignore[arg-type]
    assert dict(annotated.mig_unfit)["*"].startswith("declared layout 7x1g.10gb needs 70 GiB")


@pytest.mark.parametrize(
    ("text", "error"),
    [("8x1g.5gb", "needs 8 compute slices"), ("7x1g.6gb", "unknown MIG profile '1g.6gb'"),
     ("0x1g.5gb", "at least 1"), ("seven", "unknown MIG profile 'seven'"), ("3g.20gb++", "cannot read")],
)  # fmt: skip
def test_bad_layouts_say_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_mig_layout(text)


def test_layouts_are_read_largest_first_and_looked_up_by_type_then_gpu() -> None:
    assert parse_mig_layout("2x1g.5gb+3g.20gb") == ("3g.20gb", "1g.5gb", "1g.5gb")
    policy = PartitionPolicy(mig_layouts={"a100": ("1g.5gb",), "p4d.24xlarge": ("7g.40gb",)})
    assert policy.layout_for("p4d.24xlarge", "A100") == ("7g.40gb",)
    assert policy.layout_for("a2-highgpu-1g", "A100") == ("1g.5gb",)
    assert policy.layout_for("p5.48xlarge", "H100") is None
    assert replace(policy, mig_layouts={}).layout_for("p4d.24xlarge", "A100") is None
