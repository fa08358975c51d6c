"""``spotfleet explain``: why a job is where it is, or why it is still pending.

Two sources, one rendering:

- ``spotfleet explain JOB_ID`` asks the controller (``GET /v1/jobs/{id}/explain``,
  served from ``spotfleet.policies.explain.explain_job(...).to_dict()``);
- ``spotfleet explain --spec job.yaml`` plans the spec offline against the
  bundled catalog: what it would cost and why each other offering was
  rejected, before submitting anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from spotfleet.cli import output

console = Console()


def render(data: dict[str, Any], out: Console | None = None) -> None:
    """Print an explanation dict (``Explanation.to_dict()``) with rich."""
    out = out or console
    out.print(f"[bold]{data['job_id']}[/bold] ({data['name']}, {data['priority']}) — {data['summary']}")
    if data.get("policy_note"):
        out.print(f"[yellow]note:[/yellow] {data['policy_note']}")
    if data.get("markets"):
        out.print(f"market: {' or '.join(data['markets'])} — {data['market_reason']}")
    elif data.get("market_reason"):
        out.print(f"market: none this step — {data['market_reason']}")
    if data.get("note"):
        out.print(f"preemption: {data['note']}")
    extra = data.get("extra") or {}
    if extra.get("gpu_share"):
        out.print(f"GPU share: {extra['gpu_share']}")
    for line in extra.get("isolation", []):
        out.print(f"isolation: {line}")
    for line in extra.get("not_placed_on", []):
        out.print(f"not placed on {line}")
    deadline = extra.get("deadline") or {}
    if market := deadline.get("spot_market"):
        out.print(f"spot market: available {market['availability']:.0%} of the time, runs of "
                  f"{market['mean_up_h']:.1f} h up / {market['mean_down_h']:.1f} h down (learned), "
                  f"{market['reclaims_per_h']:.2f} reclaims/h")  # fmt: skip
    if slack := deadline.get("slack"):
        out.print(f"deadline slack: {slack['summary']}")
    if loss := deadline.get("reclaim_loss"):
        if loss["fits_notice"]:
            cost = "a restart"
        elif loss["reserved_work_h"] is None:
            cost = "a restart and all work done (no periodic checkpoint), held in reserve"
        else:
            cost = f"a restart and up to {loss['reserved_work_h']:.2f} h of work, held in reserve"
        if loss.get("at_risk_h") is not None:
            cost += f"; {loss['at_risk_h']:.2f} h unsaved now"
        out.print(f"a reclaim costs {cost} ({loss['summary']})")
    if data.get("placement"):
        t = Table(title="placement", show_edge=False)
        for col in ("node", "instance", "type", "zone", "market", "GPUs"):
            t.add_column(col)
        for p in data["placement"]:
            gpus = ",".join(str(g) for g in p["gpu_indices"]) + (
                f" ({p['mig_slices']}/7 MIG)" if p["mig_slices"] else ""
            )
            t.add_row(str(p["node_rank"]), p["instance_id"], p["instance_type"], p["zone"], p["market"], gpus)
        out.print(t)
    if data.get("top"):
        t = Table(title=f"best offerings ({data['compatible']} compatible), $ per {data['work_unit']}", show_edge=False)
        for col, justify in (("#", "right"), ("provider", "left"), ("type", "left"), ("zone", "left"),
                             ("market", "left"), ("fabric", "left"), ("$/h", "right"), ("speed/GPU", "right"), ("scaling", "right"), ("hazard/h", "right"),
                             ("overhead", "right"), ("egress $/h", "right"), ("per box", "right"),
                             ("$/unit", "right")):  # fmt: skip
            t.add_column(col, justify=justify)  # type: ignore[arg-type]
        for i, r in enumerate(data["top"], 1):
            t.add_row(str(i), r["provider"], f"{r['instance_type']} ({r['gpus']}×{r['gpu']})", r["zone"], r["market"],
                      r.get("interconnect", "tcp"), f"{r['price_per_hour']:.3f}", f"{r['throughput']:.2f}", f"{r.get('scaling', 1.0):.3f}", f"{r['hazard']:.3f}",
                      f"{r['overhead']:.1%}", f"{r['egress_per_hour']:.2f}", str(r["fill"]),
                      f"{r['cost_per_work']:.4f}")  # fmt: skip
        out.print(t)
    if data.get("rejected"):
        t = Table(title="rejected offerings", show_edge=False)
        t.add_column("count", justify="right")
        t.add_column("constraint failed")
        t.add_column("e.g.")
        for g in data["rejected"][:12]:
            t.add_row(str(g["count"]), g["reason"], ", ".join(g["examples"][:2]))
        out.print(t)


def explain_spec(path: Path) -> dict[str, Any]:
    """Plan one spec offline against the bundled catalog."""
    from spotfleet.catalog import load_catalog
    from spotfleet.clock import utcnow
    from spotfleet.model.job import Job, JobState
    from spotfleet.model.snapshot import Snapshot, sequential_ids
    from spotfleet.model.spec import load_specs
    from spotfleet.policies.explain import explain_job

    spec = load_specs(path.read_text(), source=str(path))[0]
    now = utcnow()
    job = Job(f"{spec.name}-dry-run", spec, JobState.PENDING, now, now)
    snap = Snapshot(now=now, jobs={job.id: job}, instances={}, offerings=load_catalog(), new_id=sequential_ids())
    return explain_job(snap, job.id).to_dict()


JOB_ID = typer.Argument(None, help="job id (asks the controller)")
SPEC = typer.Option(None, "--spec", help="explain a job spec offline against the bundled catalog")
API = typer.Option(None, "--api", help="controller URL (default $SPOTFLEET_API)")


def _view(data: dict[str, Any], wide: bool) -> str:
    import io
    import sys

    buf = io.StringIO()
    render(data, Console(file=buf, width=Console().width if sys.stdout.isatty() else 200,
                         force_terminal=sys.stdout.isatty()))  # fmt: skip
    return buf.getvalue()


def explain(
    job_id: str | None = JOB_ID,
    spec: Path | None = SPEC,
    api: str | None = API,
    fmt: output.Format = output.OUTPUT,
    as_json: bool = output.JSON_ALIAS,
) -> None:
    """Why a job is where it is, or why it is still pending."""
    from spotfleet.cli.client import ApiClient, fail
    from spotfleet.errors import InvalidSpec

    if spec is not None:
        try:
            data = explain_spec(spec)
        except InvalidSpec as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"{spec}: {exc.strerror}")
    elif job_id is not None:
        data = ApiClient(api).get(f"/v1/jobs/{job_id}/explain")
    else:
        fail("give a JOB_ID or --spec FILE")
    output.emit(data, output.resolve(fmt, as_json), _view)


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
