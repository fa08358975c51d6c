"""Interconnect in the model: per instance type, required by a job, shown by explain."""

from __future__ import annotations

import pytest

from spotfleet.catalog import load_catalog
from spotfleet.model.interconnect import Interconnect, interconnect_of
from spotfleet.model.spec import JobSpec
from spotfleet.policies import throughput
from spotfleet.policies.explain import explain_job
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import ON_DEMAND_ONLY
from spotfleet.policies.selection import OfferingIndex, economics_of, rank
from spotfleet.policies.shape import shape_of
from spotfleet.policies.spotfleet import SpotfleetPolicy
from spotfleet.policies.throughput import scaling_efficiency
from spotfleet.store.convert import offering_from_dict, offering_to_dict

from .builders import job, launches, offering, snapshot

EFA_BOX = offering("p5.48xlarge", "H100", 8, 98.0, interconnect="efa")
TCP_BOX = offering("g6.xlarge", "L4", 8, 9.0, gpu_memory_gib=24, zone="use1-az2")


def test_instance_types_map_to_their_fabric() -> None:
    assert interconnect_of("p5.48xlarge") is Interconnect.EFA
    assert interconnect_of("p4d.24xlarge") is Interconnect.EFA
    assert interconnect_of("g5.48xlarge") is Interconnect.EFA
    assert interconnect_of("g5.xlarge") is Interconnect.TCP
    assert interconnect_of("a3-highgpu-8g") is Interconnect.GPUDIRECT_TCPX
    assert interconnect_of("a2-highgpu-8g") is Interconnect.TCP


def test_the_catalog_carries_it_and_the_store_round_trips_it() -> None:
    by_type = {o.instance_type: o.interconnect for o in load_catalog(("aws", "gcp"))}
    assert by_type["p5.48xlarge"] == "efa" and by_type["g5.xlarge"] == "tcp"
    assert by_type.get("a3-highgpu-8g", "gpudirect-tcpx") == "gpudirect-tcpx"
    assert offering_from_dict(offering_to_dict(EFA_BOX)).interconnect == "efa"


def test_a_job_that_needs_efa_rejects_other_fabrics_with_the_reason() -> None:
    spec = JobSpec.model_validate(
        {"name": "ddp", "command": ["torchrun"], "resources": {"gpus": 8, "nodes": 2, "interconnect": "efa"}}
    )
    req = spec.node_requirements()
    assert req.interconnect == "efa"
    assert EFA_BOX.rejection(req) is None
    assert TCP_BOX.rejection(req) == "interconnect tcp, job needs efa"
    # tcp (or nothing) asks for nothing
    plain = JobSpec.model_validate({"name": "x", "command": ["x"], "resources": {"gpus": 8, "interconnect": "tcp"}})
    assert EFA_BOX.rejection(plain.node_requirements()) is None and TCP_BOX.rejection(plain.node_requirements()) is None


def test_explain_shows_the_fabric_of_each_offering_and_why_others_were_rejected() -> None:
    j = job("j", priority="critical", resources={"gpus": 8, "nodes": 2, "interconnect": "efa"})
    e = explain_job(snapshot(jobs=[j], offerings=[EFA_BOX, TCP_BOX]), "j")
    assert [(r.instance_type, r.interconnect) for r in e.top] == [("p5.48xlarge", "efa")]
    assert any("interconnect tcp, job needs efa" in g.reason for g in e.rejected)
    assert e.to_dict()["top"][0]["interconnect"] == "efa"


# Multi-node scaling by fabric: the same H100 box on EFA and on plain TCP, TCP 15% cheaper per hour.
H100_EFA = offering("p5.48xlarge", "H100", 8, 100.0, interconnect="efa")
H100_TCP = offering("h100-tcp-8x", "H100", 8, 85.0, zone="use1-az2")


def test_scaling_efficiency_per_fabric_and_gang_size() -> None:
    assert scaling_efficiency("tcp", 1) == 1.0 == scaling_efficiency("efa", 1)  # NVLink inside one box
    assert scaling_efficiency("efa", 2) == pytest.approx(0.975)
    assert scaling_efficiency("gpudirect-tcpx", 2) == pytest.approx(0.95)
    assert scaling_efficiency("tcp", 2) == pytest.approx(0.75)
    assert scaling_efficiency("tcp", 4) == pytest.approx(0.75**2)
    # the published p4d/EFA point it is fitted to: 16 nodes ≈ 14.4/16 = 0.90 of linear
    assert scaling_efficiency("efa", 16) == pytest.approx(14.4 / 16, abs=0.01)


def _ranked(nodes: int) -> list[tuple[str, float, float]]:
    j = job("j", priority="critical", resources={"gpus": 8, "nodes": nodes})
    fc, knobs = Forecast(), Knobs()
    shape, econ = shape_of(j.spec, fc), economics_of(j, fc, knobs)
    slow = rank([H100_EFA, H100_TCP], shape=shape, econ=econ, markets=ON_DEMAND_ONLY, forecast=fc)
    fast = OfferingIndex([H100_EFA, H100_TCP], forecast=fc).ranked(shape, ON_DEMAND_ONLY, econ)
    # the fast path (RankTable, what plan() reads) and the explain path agree, scaling included
    assert [s.offering.key for s in slow.scored] == [s.offering.key for s in fast]
    assert [s.cost_per_work for s in slow.scored] == pytest.approx([s.cost_per_work for s in fast])
    return [(s.offering.interconnect, s.scaling, s.cost_per_work) for s in slow.scored]


def test_a_gang_prefers_efa_when_it_is_cheaper_per_unit_of_work_than_cheaper_tcp() -> None:
    h100 = throughput.table_throughput("H100")
    # one node: no inter-node traffic, the cheaper TCP box wins
    assert [r[0] for r in _ranked(1)] == ["tcp", "efa"]
    # two nodes: TCP keeps 0.75 of linear, EFA 0.975 — $85/(0.75·8·H100) > $100/(0.975·8·H100)
    (efa, tcp) = _ranked(2)
    assert efa[:2] == ("efa", pytest.approx(0.975)) and tcp[:2] == ("tcp", pytest.approx(0.75))
    assert efa[2] == pytest.approx(100.0 / (0.975 * 8 * h100))
    assert tcp[2] == pytest.approx(85.0 / (0.75 * 8 * h100))


def test_planner_launches_the_gang_on_efa_and_explain_shows_the_factor() -> None:
    j = job("j", priority="critical", resources={"gpus": 8, "nodes": 2})
    snap = snapshot(jobs=[j], offerings=[H100_TCP, H100_EFA])
    assert {launch.offering.interconnect for launch in launches(SpotfleetPolicy().decide(snap))} == {"efa"}
    e = explain_job(snap, "j")
    assert [(r.interconnect, round(r.scaling, 3)) for r in e.top] == [("efa", 0.975), ("tcp", 0.75)]
    assert e.to_dict()["top"][1]["scaling"] == pytest.approx(0.75)
