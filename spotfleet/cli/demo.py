"""``spotfleet demo``: the whole loop on one machine in about a minute.

A controller on SQLite in a temporary directory with the local provider (real
agent and job processes), a small mixed workload, a live view, and a summary of
what it cost against the same instance-hours on on-demand.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

DEMO_JOBS: list[dict[str, Any]] = [
    {"name": "sweep-lr-1e4", "tenant": "research", "priority": "opportunistic",
     "resources": {"gpus": 1, "gpu_types": ["V100"]}, "steps": 240},
    {"name": "sweep-lr-3e4", "tenant": "research", "priority": "opportunistic",
     "resources": {"gpus": 1, "gpu_types": ["V100"]}, "steps": 200},
    {"name": "finetune-nightly", "tenant": "product", "priority": "normal",
     "resources": {"gpus": 1, "gpu_types": ["A10G"]}, "steps": 260, "deadline_minutes": 30},
    {"name": "eval-release", "tenant": "product", "priority": "critical",
     "resources": {"gpus": 2, "gpu_types": ["V100"]}, "steps": 160},
]  # fmt: skip
STEP_SECONDS = 0.1


def _spec(job: dict[str, Any], now: datetime) -> dict[str, Any]:
    spec = {k: v for k, v in job.items() if k not in ("steps", "deadline_minutes")}
    spec["command"] = ["python", "-m", "spotfleet.demo_job", "--steps", str(job["steps"]),
                       "--step-seconds", str(STEP_SECONDS)]  # fmt: skip
    spec["checkpoint"] = {"interval": "5s"}
    if "deadline_minutes" in job:
        spec["deadline"] = (now + timedelta(minutes=job["deadline_minutes"])).isoformat()
        spec["expected_duration"] = f"{job['steps'] * STEP_SECONDS:.0f}s"
    return spec


def demo(
    keep: bool = typer.Option(False, "--keep", help="keep the temporary directory"),
    timeout: float = typer.Option(85.0, "--timeout", help="give up after this many seconds"),
) -> None:
    """Run a controller with the local provider on a small mixed workload."""
    import logging

    from spotfleet.config import load_config
    from spotfleet.model.spec import parse_spec
    from spotfleet.service import Service

    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    console = Console()
    tmp = Path(tempfile.mkdtemp(prefix="spotfleet-demo-"))
    config = load_config(overrides={
        "data_dir": str(tmp), "api.port": 0, "reconcile.interval": "0.5s", "reconcile.idle_ttl": "3s",
        "reconcile.heartbeat": "0.5s", "providers": {"local": {"heartbeat": "0.5s", "max_instances": 8}},
    })  # fmt: skip
    service = Service(config)
    service.start_background()
    console.print(f"[bold]spotfleet demo[/] — controller at {service.url}, SQLite in {tmp}, local provider")
    started = time.monotonic()
    now = datetime.now(UTC)
    jobs = [service.controller.submit(parse_spec(_spec(j, now))) for j in DEMO_JOBS]
    ok = False
    interrupted: str | None = None
    try:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            while time.monotonic() - started < timeout:
                if interrupted is None:
                    interrupted = _maybe_interrupt(service, jobs[0].id)
                view, done = _view(service, [j.id for j in jobs], time.monotonic() - started)
                live.update(view)
                if done:
                    ok = True
                    break
                time.sleep(0.25)
        if interrupted is not None:
            _interruption_story(console, service, jobs[0].id, interrupted)
        _summary(console, service, time.monotonic() - started)
        _cost_report(console, service)
    finally:
        service.stop()
        for provider in service.providers.values():
            stop_all = getattr(provider, "stop_all", None)
            if stop_all is not None:
                stop_all()
        if not keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    if not ok:
        console.print("[red]the demo did not finish in time[/]")
        raise typer.Exit(1)


def _maybe_interrupt(service: Any, job_id: str) -> str | None:
    """Once the first spot job is a third done, have the cloud announce a reclaim
    of its instance (8 s of notice; it really dies when the notice runs out)."""
    from spotfleet.model.events import NoticeKind

    job = service.store.get_job(job_id)
    total = (job.progress.get("extra") or {}).get("total_steps") or 0
    if not job.instance_ids or not total or (job.progress.get("step") or 0) < total / 3:
        return None
    instance_id: str = job.instance_ids[0]
    service.controller.interrupt(instance_id, kind=NoticeKind.SPOT_INTERRUPTION, notice=timedelta(seconds=8))
    return instance_id


NEWS = ("instance.interrupt_injected", "instance.draining", "instance.requested", "job.draining", "job.pending",
        "job.bound", "instance.terminated", "job.succeeded")  # fmt: skip


def _view(service: Any, job_ids: list[str], elapsed: float) -> tuple[Group, bool]:
    from spotfleet.spend import summarize

    store = service.store
    jobs = {j.id: j for j in store.list_jobs()}
    instances = {i.id: i for i in store.list_instances()}
    table = Table(title=f"jobs — {elapsed:4.0f}s")
    for col in ("JOB", "CLASS", "STATE", "PROGRESS", "INSTANCE", "MARKET", "ATTEMPT"):
        table.add_column(col)
    for jid in job_ids:
        j = jobs[jid]
        step, total = j.progress.get("step"), (j.progress.get("extra") or {}).get("total_steps")
        bar = f"{step}/{total}" if step is not None else "-"
        inst = instances.get(j.instance_ids[0]) if j.instance_ids else None
        table.add_row(j.spec.name, j.spec.priority.value, j.state.value, bar,
                      inst.offering.instance_type if inst else "-", inst.market.value if inst else "-", str(j.attempt))  # fmt: skip
    s = summarize(store, now=service.clock.now())
    fleet = Table(title="fleet")
    for col in ("LIVE SPOT", "LIVE ON-DEMAND", "SPEND RATE", "SPENT SO FAR", "ON-DEMAND WOULD BE"):
        fleet.add_column(col)
    fleet.add_row(str(s.instances_by_market.get("spot", 0)), str(s.instances_by_market.get("on_demand", 0)),
                  f"${s.rate_per_hour:.2f}/h", f"${s.total:.4f}", f"${s.on_demand_equivalent:.4f}")  # fmt: skip
    all_done = all(jobs[j].terminal for j in job_ids)
    live = [i for i in instances.values() if i.live]
    news = Table(title="what the controller did", show_header=False, box=None)
    news.add_column("at")
    news.add_column("event")
    for e in [e for e in store.events(limit=200) if e.kind in NEWS][-8:]:
        news.add_row(e.at.strftime("%H:%M:%S"), e.message[:110])
    return Group(table, fleet, news), all_done and not live


def _interruption_story(console: Console, service: Any, job_id: str, instance_id: str) -> None:
    """The spot interruption, step by step, from the controller's own record."""
    store = service.store
    job = store.get_job(job_id)
    first = store.get_instance(instance_id)
    replacement = next((i for i in store.list_instances() if i.reserved_for == job_id), None)
    table = Table(title=f"the spot interruption of {first.id} ({job.spec.name})", show_header=False, box=None)
    table.add_column("at")
    table.add_column("what happened")
    wanted = {first.id, job_id, *([replacement.id] if replacement else [])}
    for e in store.events(limit=500):
        if (e.instance_id in wanted or e.job_id in wanted) and e.kind not in ("job.submitted",):
            table.add_row(e.at.strftime("%H:%M:%S.%f")[:-3], e.message[:120])
    console.print(table)
    if replacement is not None and first.notice_deadline is not None:
        lead = (first.notice_deadline - replacement.created_at).total_seconds()
        console.print(f"replacement {replacement.id} was bought {lead:.1f}s before the reclaim deadline; "
                      f"the job resumed from its checkpoint (attempt {job.attempt}, {job.interruptions} interruption)")  # fmt: skip


def _summary(console: Console, service: Any, elapsed: float) -> None:
    """Jobs done, instance-hours by market, and dollars from the ledger (billing
    minimums included), against the same instance-hours at on-demand prices."""
    from spotfleet.cli.cost import compute_report
    from spotfleet.ledger.money import fmt
    from spotfleet.spend import summarize

    s = summarize(service.store, now=service.clock.now())
    totals = compute_report(service.store, now=service.clock.now()).totals
    table = Table(title=f"summary after {elapsed:.0f}s")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("jobs", ", ".join(f"{n} {state}" for state, n in sorted(s.jobs_by_state.items())))
    for market in ("spot", "on_demand"):
        table.add_row(f"instance-hours {market}", f"{s.instance_hours.get(market, 0.0):.4f}")
    table.add_row("spent so far (live view)", f"${s.total:.4f}")
    table.add_row("dollars spent (ledger)", fmt(totals.cost, places=4))
    table.add_row("same instance-hours on on-demand", fmt(totals.on_demand, places=4))
    saved = totals.on_demand - totals.cost
    pct = 100.0 * saved / totals.on_demand if totals.on_demand else 0.0
    table.add_row("saved", f"{fmt(saved, places=4)} ({pct:.0f}%)")
    console.print(table)
    console.print("[dim]The live view bills what the ledger bills: each instance's 60 s minimum is charged when it "
                  "ends, so the two agree once every instance is given back (the ledger then splits each dollar "
                  "between jobs and idle).[/]")  # fmt: skip
    sys.stdout.flush()


def _cost_report(console: Console, service: Any) -> None:
    """End with the ledger's report (what ``spotfleet cost report --by tenant --by market`` prints)."""
    from spotfleet.cli.cost import compute_report, print_report

    report = compute_report(service.store, now=service.clock.now(), by=["tenant", "market"])
    print_report(console, report, title="spotfleet cost report --by tenant --by market")
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command()(demo)
