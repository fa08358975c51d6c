"""User commands: submit, jobs, job, cancel, instances, logs, events."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from spotfleet.cli.client import ApiClient, fail
from spotfleet.errors import InvalidSpec
from spotfleet.model.spec import load_specs

API = typer.Option(None, "--api", help="controller URL (default $SPOTFLEET_API or http://127.0.0.1:8478)")
JSON = typer.Option(False, "--json", help="print JSON instead of a table")
STATE_STYLE = {"pending": "yellow", "bound": "cyan", "running": "green", "draining": "magenta",
               "succeeded": "bold green", "failed": "bold red", "cancelled": "dim"}  # fmt: skip
console = Console()


def _age(iso: str | None) -> str:
    if not iso:
        return "-"
    from spotfleet.model.durations import format_duration

    return format_duration(datetime.now(UTC) - datetime.fromisoformat(iso))


def submit(
    files: list[Path] = typer.Argument(..., help="job spec YAML files (one or more specs each)"),
    api: str | None = API,
    dry_run: bool = typer.Option(False, "--dry-run", help="validate only"),
) -> None:
    """Validate and submit job specs."""
    specs = []
    for path in files:
        try:
            text = path.read_text()
        except OSError as exc:
            fail(f"{path}: {exc.strerror}")
        try:
            specs.extend(load_specs(text, source=str(path)))
        except InvalidSpec as exc:
            fail(str(exc))
    if dry_run:
        for spec in specs:
            typer.echo(f"ok: {spec.name}")
        return
    client = ApiClient(api)
    for spec in specs:
        job = client.post("/v1/jobs", json=spec.model_dump(mode="json", exclude_none=True))
        typer.echo(f"submitted {job['id']} ({job['name']}, {job['priority']})")


def jobs(
    api: str | None = API,
    state: list[str] = typer.Option([], "--state", "-s", help="filter by state (repeatable)"),
    as_json: bool = JSON,
) -> None:
    """List jobs."""
    params: list[tuple[str, str]] = [("state", s) for s in state]
    data = ApiClient(api).get("/v1/jobs", params=params)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    table = Table(title=f"{len(data)} jobs")
    for col in ("ID", "NAME", "TENANT", "CLASS", "STATE", "GPUS", "ATTEMPT", "AGE", "MESSAGE"):
        table.add_column(col)
    for j in data:
        style = STATE_STYLE.get(j["state"], "")
        table.add_row(j["id"], j["name"], j["tenant"], j["priority"], f"[{style}]{j['state']}[/]",
                      f"{j['gpus']}×{j['nodes']}" if j["nodes"] > 1 else str(j["gpus"]), str(j["attempt"]),
                      _age(j["created_at"]), (j["message"] or "")[:60])  # fmt: skip
    console.print(table)


def job(job_id: str = typer.Argument(...), api: str | None = API, as_json: bool = JSON) -> None:
    """Show one job: spec, state, attempts, recent events."""
    data = ApiClient(api).get(f"/v1/jobs/{job_id}")
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    style = STATE_STYLE.get(data["state"], "")
    console.print(f"[bold]{data['id']}[/] {data['name']} ({data['tenant']}, {data['priority']}) "
                  f"[{style}]{data['state']}[/] — {data['message']}")  # fmt: skip
    if data.get("checkpoint"):
        c = data["checkpoint"]
        console.print(f"last checkpoint: step {c.get('step')} at {c.get('at')} ({c.get('path')})")
    if data.get("progress"):
        console.print(f"progress: {data['progress']}")
    table = Table(title="attempts")
    for col in ("ATTEMPT", "NODE", "INSTANCE", "GPUS", "BOUND", "STARTED", "ENDED", "OUTCOME"):
        table.add_column(col)
    for a in data.get("attempts", []):
        table.add_row(str(a["attempt"]), str(a["node_rank"]), a["instance_id"], str(a["gpus"]),
                      _clock(a["bound_at"]), _clock(a["started_at"]), _clock(a["ended_at"]), a["outcome"] or "")  # fmt: skip
    console.print(table)
    for e in data.get("events", [])[-10:]:
        console.print(f"  {_clock(e['at'])} {e['message']}")


def _clock(iso: Any) -> str:
    return datetime.fromisoformat(iso).strftime("%H:%M:%S") if iso else "-"


def cancel(job_id: str = typer.Argument(...), api: str | None = API) -> None:
    """Cancel a job (a running job is stopped)."""
    data = ApiClient(api).post(f"/v1/jobs/{job_id}/cancel")
    typer.echo(f"cancel requested for {data['id']} (was {data['state']})")


def instances(api: str | None = API, all_: bool = typer.Option(False, "--all", help="include terminated"),
              as_json: bool = JSON) -> None:  # fmt: skip
    """List instances with their market, price and state."""
    data = ApiClient(api).get("/v1/instances", params={"all": str(all_).lower()})
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    table = Table(title=f"{len(data)} instances")
    for col in ("ID", "PROVIDER", "TYPE", "GPUS", "ZONE", "MARKET", "$/H", "STATE", "AGE", "NOTE"):
        table.add_column(col)
    for i in data:
        note = i["notice"] or ("cordoned" if i["cordoned"] else "") or (i["message"] or "")[:40]
        table.add_row(i["id"], i["provider"], i["instance_type"], f"{i['gpus']}×{i['gpu']}", i["zone"], i["market"],
                      f"{i['price_per_hour']:.3f}", i["state"], _age(i["created_at"]), note)  # fmt: skip
    console.print(table)


def logs(job_id: str = typer.Argument(...), attempt: int | None = typer.Option(None, "--attempt"),
         api: str | None = API) -> None:  # fmt: skip
    """Print a job's stdout/stderr (every attempt, or one)."""
    params = {"attempt": attempt} if attempt else {}
    text = ApiClient(api).request("GET", f"/v1/jobs/{job_id}/logs", params=params).text
    typer.echo(text, nl=False)


def events(api: str | None = API, limit: int = typer.Option(30, "--limit", "-n")) -> None:
    """Recent controller decisions and what happened."""
    for e in ApiClient(api).get("/v1/events", params={"limit": limit}):
        typer.echo(f"{_clock(e['at'])} {e['level']:7s} {e['message']}")


def register(app: typer.Typer) -> None:
    for fn in (submit, jobs, job, cancel, instances, logs, events):
        app.command()(fn)
