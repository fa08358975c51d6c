"""The ledger on real store data: a job interrupted mid-training through the
controller's own entry points, its progress and telemetry from heartbeats."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from spotfleet.api.app import create_app
from spotfleet.cli.cost import compute_report
from spotfleet.controller.sync import CHECKPOINTED_EXIT_CODE
from spotfleet.ledger.attribution import Phase
from spotfleet.ledger.load import build
from spotfleet.ledger.report import job_breakdown
from spotfleet.ledger.usage import job_gpu_usage, load_usage
from spotfleet.model import JobState
from spotfleet.providers.fake import FakeProvider, gpu_offering
from spotfleet.store import Store
from spotfleet.wire import CheckpointInfo, Heartbeat, JobStatus
from tests.controller.harness import TOKEN, Harness, make_harness


def status(h: Harness, job_id: str, step: int, *, ckpt: int | None = None, state: str = "running",
           code: int | None = None) -> JobStatus:  # fmt: skip
    job = h.job(job_id)
    return JobStatus(job_id=job_id, attempt=job.attempt, status=state, exit_code=code,
                     progress={"step": step, "total_steps": 100},
                     checkpoint=CheckpointInfo(path="/ckpt", step=ckpt, at=h.clock.now()) if ckpt is not None else None)  # fmt: skip


def gpu_telemetry(job_id: str, attempt: int, util: float, mem: float) -> dict[str, Any]:
    return {
        "nvml": {"available": True},
        "gpus": [{"index": 0, "utilization_pct": util, "memory_used_mib": mem, "memory_total_mib": 16384.0}],
        "jobs": [{"job_id": job_id, "attempt": attempt, "node_rank": 0, "gpu_indices": [0], "utilization_pct": util,
                  "memory_used_mib": mem, "memory_total_mib": 16384.0}],
    }  # fmt: skip


def beat(h: Harness, instance_id: str, st: JobStatus, telemetry: dict[str, Any] | None = None) -> None:
    h.controller.agents.heartbeat(TOKEN + instance_id, Heartbeat(jobs=[st], telemetry=telemetry or {}))


def run_interrupted_job(h: Harness) -> str:
    job = h.submit(name="train", tenant="research", priority="opportunistic", checkpoint={"interval": "10m"})
    h.step()
    h.register_all()
    (first,) = h.live()
    h.clock.advance(seconds=30)
    beat(h, first.id, status(h, job.id, 0), gpu_telemetry(job.id, 1, 0.0, 900.0))  # loading: no step yet
    h.step()
    h.clock.advance(seconds=30)
    beat(h, first.id, status(h, job.id, 10), gpu_telemetry(job.id, 1, 95.0, 12000.0))  # first progress
    h.clock.advance(seconds=600)
    beat(h, first.id, status(h, job.id, 30, ckpt=20), gpu_telemetry(job.id, 1, 97.0, 14500.0))
    h.clock.advance(seconds=300)
    beat(h, first.id, status(h, job.id, 35, ckpt=20), gpu_telemetry(job.id, 1, 96.0, 14000.0))
    h.provider.preempt(first.provider_id)  # type: ignore[arg-type]
    h.step()
    assert h.job(job.id).state is JobState.DRAINING
    h.clock.advance(seconds=20)
    # the checkpoint on the notice failed: it leaves at step 35 with step 20 saved
    beat(h, first.id, status(h, job.id, 35, ckpt=20, state="exited", code=CHECKPOINTED_EXIT_CODE))
    h.step()
    assert h.job(job.id).attempt == 2
    h.step()
    h.register_all()
    second = next(i for i in h.live() if i.id != first.id)
    h.clock.advance(seconds=60)
    beat(h, second.id, status(h, job.id, 20))  # resumed from step 20: not progress yet
    h.step()
    h.clock.advance(seconds=40)
    beat(h, second.id, status(h, job.id, 25))  # first progress of attempt 2
    h.clock.advance(seconds=1200)
    beat(h, second.id, status(h, job.id, 100, ckpt=100, state="exited", code=0))
    h.step()
    assert h.job(job.id).state is JobState.SUCCEEDED
    h.clock.advance(minutes=6)
    h.step()
    h.step()
    assert not h.live()
    return job.id


def test_interrupted_job_costs_restart_overhead_and_redone_work(store: Store, tmp_path: Path) -> None:
    """On SQLite and PostgreSQL."""
    a = gpu_offering(zone="us-east-1a", spot=0.90)
    b = gpu_offering(zone="us-east-1b", spot=0.95)
    h = make_harness(store, tmp_path, FakeProvider(offering_list=[a, b]))
    job_id = run_interrupted_job(h)
    usage = load_usage(store, [job_id])
    u1, u2 = usage[(job_id, 1, 0)], usage[(job_id, 2, 0)]
    assert (u1.resume_step, u1.last_step, u1.checkpoint_step) == (None, 35, 20)
    assert (u2.resume_step, u2.last_step) == (20, 100)
    assert u1.peak_gpu_memory_mib == 14500.0 and u1.gpu_samples == 4
    assert job_gpu_usage(store, job_id)["peak_gpu_memory_mib"] == 14500.0

    now = h.clock.now()
    data = build(store, now=now)
    lines = data.ledger.lines
    for bill in data.ledger.instances.values():
        assert bill.closed
        assert sum(ln.cost for ln in lines if ln.segment.instance_id == bill.instance_id) == bill.cost
    phases: dict[Phase, int] = {}
    for ln in lines:
        if ln.job_id == job_id:
            phases[ln.phase] = phases.get(ln.phase, 0) + ln.cost
    assert phases[Phase.STARTUP] > 0 and phases[Phase.RESTART] > 0
    # attempt 1 reached step 35 from 0, the next resumed from 20: 15/35 of its productive time was redone
    a1 = [
        ln
        for ln in lines
        if ln.attempt is not None and ln.attempt.attempt == 1 and ln.phase in (Phase.USEFUL, Phase.REDONE)
    ]
    redone = sum(ln.cost for ln in a1 if ln.phase is Phase.REDONE)
    productive = sum(ln.cost for ln in a1)
    assert abs(Fraction(redone, productive) - Fraction(15, 35)) < Fraction(1, 10_000)
    # attempt 2's overhead: bound → first progress (step 25), with the resume at step 20 not counting
    a2_restart = [ln for ln in lines if ln.phase is Phase.RESTART]
    assert a2_restart and all(ln.attempt is not None and ln.attempt.attempt == 2 for ln in a2_restart)

    report = compute_report(store, now=now, by=["job"])
    t = report.totals
    assert t.interruption == phases[Phase.RESTART] + phases[Phase.REDONE]
    assert sum(s.cost for _, s in report.rows) == t.cost == sum(b.cost for b in data.ledger.instances.values())
    assert {k[0] for k, _ in report.rows} == {job_id, "(idle)"}
    per_attempt = job_breakdown(lines, job_id, usage=data.usage)
    assert [(x.attempt, x.outcome) for x in per_attempt] == [(1, "checkpointed"), (2, "succeeded")]
    assert per_attempt[0].sums.redone == redone


def test_gpus_idle_while_bound_raises_one_event_after_ten_minutes(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    job = h.submit(name="stuck", priority="normal")
    h.step()
    h.register_all()
    (inst,) = h.live()
    for _ in range(12):  # 11 minutes at 2 % with the job bound
        beat(h, inst.id, status(h, job.id, 1), gpu_telemetry(job.id, 1, 2.0, 500.0))
        h.clock.advance(minutes=1)
    idle = [e for e in sqlite_store.events(limit=200) if e.kind == "instance.gpus_idle"]
    assert len(idle) == 1 and idle[0].instance_id == inst.id and idle[0].level == "warning"
    assert load_usage(sqlite_store)[(job.id, 1, 0)].idle_fraction == 1.0
    report = compute_report(sqlite_store, now=h.clock.now())
    assert report.totals.bound_idle > 0  # the report shows the waste

    # a busy beat resets the watch; idle again for 10 minutes raises a second event
    beat(h, inst.id, status(h, job.id, 2), gpu_telemetry(job.id, 1, 80.0, 500.0))
    for _ in range(11):
        h.clock.advance(minutes=1)
        beat(h, inst.id, status(h, job.id, 2), gpu_telemetry(job.id, 1, 1.0, 500.0))
    assert len([e for e in sqlite_store.events(limit=500) if e.kind == "instance.gpus_idle"]) == 2


def test_metrics_endpoint(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    client = TestClient(create_app(h.controller))
    job = h.submit(name="m", priority="opportunistic")
    h.submit(name="eval", priority="critical")
    before = {(s.labels["priority"], s.value) for f in text_string_to_metric_families(client.get("/metrics").text)
              for s in f.samples if s.name == "spotfleet_jobs_pending"}  # fmt: skip
    assert before == {("critical", 1), ("normal", 0), ("opportunistic", 1)}
    h.step()
    h.register_all()
    inst = h.instance(h.job(job.id).instance_ids[0])
    beat(h, inst.id, status(h, job.id, 3), gpu_telemetry(job.id, 1, 77.0, 4096.0))
    h.controller.step()  # instrumented by create_app
    inst = h.instance(inst.id)
    resp = client.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("spotfleet_instances", (("instance_type", inst.offering.instance_type), ("market", "spot"),
                                            ("provider", "fake"), ("state", inst.state.value)))] == 1  # fmt: skip
    assert samples[("spotfleet_gpu_utilization_pct", (("gpu", "0"), ("instance_id", inst.id)))] == 77.0
    assert (
        samples[("spotfleet_spend_rate_usd_per_hour", (("market", "spot"), ("provider", "fake")))]
        == inst.offering.price_per_hour
    )
    assert ("spotfleet_spend_rate_usd_per_hour", (("market", "on_demand"), ("provider", "fake"))) in samples
    pending = {dict(k)["priority"]: v for (n, k), v in samples.items() if n == "spotfleet_jobs_pending"}
    assert pending == {"critical": 0, "normal": 0, "opportunistic": 0}
    assert samples[("spotfleet_reconcile_step_seconds_count", ())] >= 1
    for name in ("spotfleet_job_interruptions", "spotfleet_drains", "spotfleet_spend_usd"):
        assert name in families


def test_grafana_dashboard_uses_only_exported_metrics(sqlite_store: Store, tmp_path: Path) -> None:
    import json
    import re

    h = make_harness(sqlite_store, tmp_path)
    client = TestClient(create_app(h.controller))
    h.controller.step()
    exported = {s.name for f in text_string_to_metric_families(client.get("/metrics").text) for s in f.samples}
    exported |= {f.name for f in text_string_to_metric_families(client.get("/metrics").text)}
    dashboard = json.loads((Path(__file__).parents[2] / "deploy" / "grafana-dashboard.json").read_text())
    used = {m for p in dashboard["panels"] for t in p["targets"] for m in re.findall(r"spotfleet_\w+", t["expr"])}
    # a family with no samples yet (no notices, no GPUs) is still declared by name
    missing = {m for m in used if m not in exported and m.removesuffix("_total") not in exported}
    assert used and not missing, missing


def test_live_spend_equals_the_ledger_once_the_fleet_is_idle(sqlite_store: Store, tmp_path: Path) -> None:
    """The demo's live "spent so far" and its final ledger agree: the live view
    bills the same minimums (a 10 s instance pays 60 s) once instances end."""
    from datetime import timedelta

    from spotfleet.spend import summarize

    offerings = [gpu_offering(zone="us-east-1a", spot=0.90), gpu_offering(zone="us-east-1b", spot=0.95)]
    h = make_harness(sqlite_store, tmp_path, FakeProvider(offering_list=offerings))
    run_interrupted_job(h)
    short = h.submit(name="short")
    h.step()
    h.register_all()
    h.clock.advance(seconds=10)
    inst = h.job(short.id).instance_ids[0]
    beat(h, inst, JobStatus(job_id=short.id, attempt=1, status="exited", exit_code=0))
    h.controller.down(grace=timedelta(seconds=30))
    h.step()
    h.step()
    assert not h.live()
    now = h.clock.now() + timedelta(hours=1)
    live = summarize(h.store, now=now)
    ledger = compute_report(h.store, now=now).totals
    assert abs(live.total - ledger.cost / 1e6) < 1e-4
    assert abs(live.on_demand_equivalent - ledger.on_demand / 1e6) < 1e-4
    assert ledger.billing_minimum > 0, "the short instance paid its minimum in both views"


def test_metrics_spend_equals_the_ledger_while_running_and_after(sqlite_store: Store, tmp_path: Path) -> None:
    """Issue 14, point 7: ``spotfleet_spend_usd_total`` is the ledger's total
    (``spotfleet cost report``), not a second definition of spend: checked with
    an instance still running, after a short one that paid its minimum, and
    once the fleet is idle."""
    from datetime import timedelta

    offerings = [gpu_offering(zone="us-east-1a", spot=0.90), gpu_offering(zone="us-east-1b", spot=0.95)]
    h = make_harness(sqlite_store, tmp_path, FakeProvider(offering_list=offerings))
    client = TestClient(create_app(h.controller))

    def scraped() -> float:
        fams = text_string_to_metric_families(client.get("/metrics").text)
        return sum(s.value for f in fams for s in f.samples if s.name == "spotfleet_spend_usd_total")

    def agree() -> None:
        ledger = compute_report(h.store, now=h.clock.now()).totals
        assert abs(scraped() - ledger.cost / 1e6) < 1e-4, (scraped(), ledger.cost / 1e6)

    long = h.submit(name="long")
    short = h.submit(name="short", priority="opportunistic")
    h.step()
    h.register_all()
    h.clock.advance(seconds=10)
    beat(h, h.job(short.id).instance_ids[0], JobStatus(job_id=short.id, attempt=1, status="exited", exit_code=0))
    h.step()
    h.clock.advance(seconds=20)
    agree()  # one instance open, the other maybe ended early
    h.clock.advance(seconds=900)
    beat(h, h.job(long.id).instance_ids[0], JobStatus(job_id=long.id, attempt=1, status="running"))
    h.step()
    agree()
    h.controller.down(grace=timedelta(seconds=30))
    h.step()
    h.step()
    h.clock.advance(seconds=3600)
    agree()
    assert scraped() > 0
