"""Interconnect in the model: per instance type, required by a job, shown by explain."""

from __future__ import annotations

from spotfleet.catalog import load_catalog
from spotfleet.model.interconnect import Interconnect, interconnect_of
from spotfleet.model.spec import JobSpec
from spotfleet.policies.explain import explain_job
from spotfleet.store.convert import offering_from_dict, offering_to_dict

from .builders import job, offering, snapshot

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
