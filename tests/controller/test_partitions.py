"""The controller's side of GPU partitions, through the agent entry points the API
uses: what assignments carry, MIG orders, refused and stopped job nodes, agent
events, isolation as the ledger and explain see it. Time moves only when told."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from spotfleet.api.app import create_app
from spotfleet.api.views import partition_view
from spotfleet.clock import FakeClock
from spotfleet.controller.controller import Controller
from spotfleet.ledger.load import build
from spotfleet.ledger.report import job_breakdown
from spotfleet.ledger.usage import load_usage
from spotfleet.model import JobState
from spotfleet.model.partition import PartitionPolicy, parse_mig_layout
from spotfleet.model.snapshot import sequential_ids
from spotfleet.policies.spotfleet import SpotfleetPolicy
from spotfleet.providers.fake import FakeProvider, both_markets
from spotfleet.store import Store
from spotfleet.wire import AgentEvent, Heartbeat, JobStatus, RegisterRequest
from tests.controller.harness import TOKEN, Harness

A10G = both_markets("g5.xlarge", gpu="A10G", gpu_memory_gib=24, spot=0.4, on_demand=1.0)
A100 = both_markets("a2-highgpu-1g", gpu="A100", gpu_memory_gib=40, spot=1.2, on_demand=3.7)
A100_80 = both_markets("a2-ultragpu-1g", gpu="A100-80GB", gpu_memory_gib=80, spot=2.0, on_demand=5.0)


def harness(store: Store, tmp_path: Path, offers: list[object], policy: PartitionPolicy) -> Harness:
    clock = FakeClock()
    provider = FakeProvider(offering_list=offers, clock=clock)  # type: ignore[arg-type]
    controller = Controller(store=store, providers={"fake": provider}, policy=SpotfleetPolicy(), clock=clock,
                            data_dir=tmp_path, controller_url=lambda: "http://127.0.0.1:8478", new_id=sequential_ids(),
                            partition_policy=policy)  # fmt: skip
    controller.executor.token_factory = lambda instance_id: TOKEN + instance_id
    return Harness(controller, provider, clock, store)


def test_fractions_are_assigned_with_their_memory_share_and_mps_settings(sqlite_store: Store, tmp_path: Path) -> None:
    h = harness(sqlite_store, tmp_path, A10G, PartitionPolicy(memory_over="stop", memory_grace_samples=4))
    a = h.submit(name="quarter", priority="critical", resources={"gpu_fraction": 0.25})
    b = h.submit(name="half", priority="critical", resources={"gpu_fraction": 0.5})
    h.step()
    (inst,) = h.live()
    h.register_all()
    answer = {x.job_id: x for x in h.beat(inst.id).assignments}
    assert answer[a.id].gpu_indices == answer[b.id].gpu_indices == [0]
    pa, pb = answer[a.id].partition, answer[b.id].partition
    assert pa is not None and pb is not None
    assert (pa.kind, pa.fraction, pa.memory_limit_mib, pa.mps, pa.on_memory_over, pa.grace_samples) == (
        "fraction", 0.25, 6144.0, True, "stop", 4)  # fmt: skip
    assert pb.memory_limit_mib == 12288.0
    assert h.beat(inst.id).mig is None  # no layout declared for A10G


def test_a_mig_pool_gets_its_layout_order_and_a_refusal_requeues_and_steers_away(
    sqlite_store: Store, tmp_path: Path
) -> None:
    policy = PartitionPolicy(mig_layouts={"a100": parse_mig_layout("7x1g.5gb")}, mig_reconfigure=True)
    h = harness(sqlite_store, tmp_path, A100 + A100_80, policy)
    job = h.submit(name="small", priority="critical", resources={"mig": "1g.5gb"})
    h.step()
    (inst,) = h.live()
    assert inst.offering.instance_type == "a2-highgpu-1g"
    h.register_all()
    answer = h.beat(inst.id)
    assert answer.mig is not None and answer.mig.layout == ["1g.5gb"] * 7 and answer.mig.reconfigure
    (assigned,) = answer.assignments
    assert assigned.partition is not None and assigned.partition.mig_profile == "1g.5gb"
    # the agent cannot: MIG mode is off. It says so, and refuses the job node.
    reason = "MIG mode is off on GPU 0 (NVIDIA A100-SXM4-40GB)"
    refused = JobStatus(job_id=job.id, attempt=1, status="refused", message=f"no 1g.5gb MIG device for it: {reason}")
    h.controller.agents.heartbeat(TOKEN + inst.id, Heartbeat(jobs=[refused], partitions={"mig": {"unfit": {"*": reason}}},
                                                      events=[]))  # fmt: skip
    h.step()
    j = h.job(job.id)
    assert j.failures == 0 and f"refused by the agent on {inst.id}: no 1g.5gb MIG device" in j.history[-2].reason
    assert j.state is JobState.BOUND and h.store.get_instance(j.instance_ids[0]).offering.instance_type == (
        "a2-ultragpu-1g")  # not the unfit type again  # fmt: skip
    explained = h.controller.explain(job.id)
    assert any(f"MIG unfit: {reason} (reported by {inst.id})" in g["reason"] for g in explained["rejected"])
    assert explained["extra"]["not_placed_on"] == [f"{inst.id} (a2-highgpu-1g): MIG unfit: {reason} (reported by "
                                                   f"{inst.id})"]  # fmt: skip


def test_a_stop_for_memory_fails_the_job_with_the_agents_reason(sqlite_store: Store, tmp_path: Path) -> None:
    h = harness(sqlite_store, tmp_path, A10G, PartitionPolicy())
    job = h.submit(name="greedy", priority="critical", resources={"gpu_fraction": 0.5}, max_retries=3)
    h.step()
    (inst,) = h.live()
    h.register_all()
    h.beat(inst.id)
    telemetry = {"gpus": [{"index": 0, "utilization_pct": 90.0}], "jobs": [
        {"job_id": job.id, "attempt": 1, "node_rank": 0, "utilization_pct": 90.0, "memory_used_mib": 14000.0,
         "memory_total_mib": 23028.0, "isolation": "time-sliced", "given_share": 0.5, "used_share": 0.9,
         "memory_limit_mib": 12288.0}]}  # fmt: skip
    running = JobStatus(job_id=job.id, attempt=1, status="running", isolation="time-sliced",
                        isolation_note="MPS unavailable: nvidia-cuda-mps-control not found")  # fmt: skip
    warn = AgentEvent(kind="job.gpu_memory_over", level="warning", at=datetime(2026, 12, 3, tzinfo=UTC),
                      message=f"{job.id} node 0 holds 14000 MiB of GPU memory, over its 12288 MiB share",
                      job_id=job.id, attempt=1, node_rank=0)  # fmt: skip
    h.controller.agents.heartbeat(TOKEN + inst.id, Heartbeat(jobs=[running], telemetry=telemetry, events=[warn]))
    h.step()
    metrics = TestClient(create_app(h.controller)).get("/metrics").text
    shares = {(s.labels["job_id"], s.labels["kind"]): s.value for f in text_string_to_metric_families(metrics)
              for s in f.samples if s.name == "spotfleet_job_gpu_share"}  # fmt: skip
    assert shares == {(job.id, "given"): 0.5, (job.id, "used"): 0.9}
    h.clock.advance(seconds=600)
    why = "it holds 14000 MiB of GPU memory, over its 12288 MiB share (0.5 of GPU 0) for 3 samples in a row"
    stopped = JobStatus(job_id=job.id, attempt=1, status="exited", exit_code=-15, message=why)
    h.controller.agents.heartbeat(TOKEN + inst.id, Heartbeat(jobs=[stopped]))
    h.step()
    j = h.job(job.id)
    assert j.state is JobState.FAILED and j.message == f"stopped by the agent: {why}" and j.failures == 0
    assert h.store.job_attempts(job.id)[0]["outcome"] == "stopped"
    warnings = [e for e in h.store.events(job_id=job.id, limit=50) if e.kind == "job.gpu_memory_over"]
    assert len(warnings) == 1 and warnings[0].level == "warning" and warnings[0].instance_id == inst.id
    view = partition_view(load_usage(h.store, [job.id])[(job.id, 1, 0)])
    assert view == {"isolation": "time-sliced", "isolation_detail": "shared, not isolated",
                    "isolation_note": "MPS unavailable: nvidia-cuda-mps-control not found", "gpu_share_given": 0.5,
                    "gpu_share_used": 0.9, "peak_gpu_memory_mib": 14000.0, "gpu_memory_limit_mib": 12288.0}  # fmt: skip
    data = build(h.store, now=h.clock.now())
    (attempt,) = [a.to_dict() for a in job_breakdown(data.ledger.lines, job.id, usage=data.usage)]
    assert (attempt["isolation_detail"], attempt["gpu_share_given"], attempt["outcome"]) == (
        "shared, not isolated", 0.5, "stopped")  # fmt: skip
    assert h.controller.explain(job.id)["extra"]["isolation"] == [
        "node 0: shared, not isolated (MPS unavailable: nvidia-cuda-mps-control not found)"]  # fmt: skip


def test_register_without_partitions_changes_nothing(sqlite_store: Store, tmp_path: Path) -> None:
    h = harness(sqlite_store, tmp_path, A10G, PartitionPolicy())
    job = h.submit(name="whole", priority="critical")
    h.step()
    (inst,) = h.live()
    answer = h.controller.agents.register(TOKEN + inst.id, RegisterRequest(provider_id=inst.provider_id))
    (a,) = answer.assignments
    assert a.job_id == job.id and a.partition is None and answer.mig is None
