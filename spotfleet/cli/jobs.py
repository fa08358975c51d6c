"""User commands: submit, jobs, job, cancel, instances, logs, events.

Every read verb takes ``-o table|wide|json|yaml`` (``spotfleet.cli.output``);
``jobs``, ``instances`` and ``events`` take ``--watch``; ``logs`` takes
``--follow``. JSON carries the HTTP API's objects unchanged (docs/cli.md).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from spotfleet.cli import output
from spotfleet.cli.client import ApiClient, fail
from spotfleet.cli.exitcodes import ExitCode
from spotfleet.cli.output import Column, Format, TableView, emit
from spotfleet.cli.watch import INTERVAL_HELP, WATCH_HELP, watch
from spotfleet.model.spec import load_specs

API = typer.Option(None, "--api", help="controller URL (default $SPOTFLEET_API or http://127.0.0.1:8478)")
OUTPUT = output.OUTPUT
JSON = output.JSON_ALIAS
WATCH = typer.Option(False, "--watch", "-w", help=WATCH_HELP)
INTERVAL = typer.Option(2.0, "--interval", min=0.1, help=INTERVAL_HELP)
STATE_STYLE = {"pending": "yellow", "bound": "cyan", "running": "green", "draining": "magenta",
               "succeeded": "bold green", "failed": "bold red", "cancelled": "dim"}  # fmt: skip
TERMINAL = ("succeeded", "failed", "cancelled")


def age(iso: str | None, now: datetime | None = None) -> str:
    if not iso:
        return "-"
    from spotfleet.model.durations import format_duration

    return format_duration((now or datetime.now(UTC)) - datetime.fromisoformat(iso))


def progress_text(progress: dict[str, Any] | None) -> str:
    """``120/300 40%`` from what the job reported (``report_progress``): a step
    and a total (``total_steps``), a ``fraction``, or a bare step."""
    if not progress:
        return "-"
    extra = progress.get("extra") or {}
    step = progress.get("step")
    total = progress.get("total_steps") or extra.get("total_steps") or extra.get("total")
    if step is not None and total:
        return f"{step}/{total} {100 * float(step) / float(total):.0f}%"
    fraction = progress.get("fraction", extra.get("fraction"))
    if fraction is not None:
        return f"{100 * float(fraction):.0f}%"
    return f"step {step}" if step is not None else "-"


def _state_style(row: dict[str, Any]) -> str:
    return STATE_STYLE.get(row.get("state", ""), "")


# ---------------------------------------------------------------- views


def jobs_view(data: list[dict[str, Any]], wide: bool) -> TableView:
    now = datetime.now(UTC)
    return TableView(
        columns=[
            Column("ID", lambda j: j["id"], identifier=True),
            Column("NAME", lambda j: j["name"]),
            Column("TENANT", lambda j: j["tenant"]),
            Column("CLASS", lambda j: j["priority"]),
            Column("STATE", lambda j: j["state"], style=_state_style),
            Column("GPUS", lambda j: f"{j['gpus']}×{j['nodes']}" if j["nodes"] > 1 else j["gpus"], justify="right"),
            Column("PROGRESS", lambda j: progress_text(j.get("progress")), justify="right"),
            Column("ATTEMPT", lambda j: j["attempt"], justify="right"),
            Column("INTERRUPTIONS", lambda j: j.get("interruptions", 0), wide_only=True, justify="right"),
            Column("INSTANCES", lambda j: ",".join(j.get("instances") or []), wide_only=True, identifier=True),
            Column("DEADLINE", lambda j: j.get("deadline"), wide_only=True),
            Column("AGE", lambda j: age(j["created_at"], now), justify="right"),
            Column("MESSAGE", lambda j: (j.get("message") or "") if wide else (j.get("message") or "")[:60]),
        ],
        rows=data,
        title=f"{len(data)} jobs",
    )


def instances_view(data: list[dict[str, Any]], wide: bool) -> TableView:
    now = datetime.now(UTC)

    def note(i: dict[str, Any]) -> str:
        text = i.get("notice") or ("cordoned" if i.get("cordoned") else "") or (i.get("message") or "")
        return text if wide else text[:40]

    return TableView(
        columns=[
            Column("ID", lambda i: i["id"], identifier=True),
            Column("PROVIDER", lambda i: i["provider"]),
            Column("PROVIDER ID", lambda i: i.get("provider_id"), wide_only=True, identifier=True),
            Column("TYPE", lambda i: i["instance_type"]),
            Column("GPUS", lambda i: f"{i['gpus']}×{i['gpu']}"),
            Column("REGION", lambda i: i.get("region"), wide_only=True),
            Column("ZONE", lambda i: i["zone"]),
            Column("MARKET", lambda i: i["market"]),
            Column("$/H", lambda i: f"{i['price_per_hour']:.3f}", justify="right"),
            Column(
                "ON-DEMAND $/H",
                lambda i: f"{i.get('on_demand_price_per_hour') or 0:.3f}",
                wide_only=True,
                justify="right",
            ),
            Column("STATE", lambda i: i["state"]),
            Column("AGE", lambda i: age(i["created_at"], now), justify="right"),
            Column("NOTE", note),
        ],
        rows=data,
        title=f"{len(data)} instances",
    )


def events_view(data: list[dict[str, Any]], wide: bool) -> TableView:
    return TableView(
        columns=[
            Column("AT", lambda e: _clock(e["at"]) if not wide else e["at"]),
            Column(
                "LEVEL", lambda e: e["level"], style=lambda e: {"warning": "yellow", "error": "red"}.get(e["level"], "")
            ),
            Column("KIND", lambda e: e["kind"], wide_only=True),
            Column("JOB", lambda e: e.get("job_id"), wide_only=True, identifier=True),
            Column("INSTANCE", lambda e: e.get("instance_id"), wide_only=True, identifier=True),
            Column("MESSAGE", lambda e: e["message"]),
        ],
        rows=data,
    )


def job_view(data: dict[str, Any], wide: bool) -> Any:
    """One job: a header, its attempts and its recent events (never a raw dict)."""
    head = TableView(
        columns=[Column("FIELD", lambda r: r[0]), Column("VALUE", lambda r: r[1])],
        rows=[
            ("id", data["id"]),
            ("name", data["name"]),
            ("tenant", data["tenant"]),
            ("class", data["priority"]),
            ("state", f"{data['state']} since {data.get('state_since', '-')}"),
            ("message", data.get("message") or "-"),
            ("progress", progress_text(data.get("progress"))),
            (
                "attempt",
                f"{data['attempt']} ({data.get('interruptions', 0)} interruptions, {data.get('failures', 0)} failures)",
            ),
            ("deadline", data.get("deadline") or "-"),
            ("checkpoint", _checkpoint(data.get("checkpoint"))),
            ("instances", ", ".join(data.get("instances") or []) or "-"),
        ],
    )
    attempts = TableView(
        columns=[
            Column("ATTEMPT", lambda a: a["attempt"], justify="right"),
            Column("NODE", lambda a: a["node_rank"], justify="right"),
            Column("INSTANCE", lambda a: a["instance_id"], identifier=True),
            Column("GPUS", _gpus, justify="right"),
            Column("BOUND", lambda a: _clock(a["bound_at"])),
            Column("STARTED", lambda a: _clock(a["started_at"])),
            Column("ENDED", lambda a: _clock(a["ended_at"])),
            Column("OUTCOME", lambda a: a.get("outcome") or ("running" if not a.get("ended_at") else "-")),
        ],
        rows=data.get("attempts", []),
        title="attempts",
    )
    partitions = [line for line in (_partition_line(a) for a in data.get("attempts", [])) if line]
    events = events_view(data.get("events", [])[-10:], wide)
    events.title = "recent events"
    if not output.is_tty():
        return "\n".join(
            [head.plain(wide=wide), "attempts", attempts.plain(wide=wide), *partitions, "recent events",
             events.plain(wide=wide)]
        )  # fmt: skip
    from rich.console import Group
    from rich.text import Text

    return Group(head.rich(wide=wide), attempts.rich(wide=wide), *(Text(p) for p in partitions), events.rich(wide=wide))


def _checkpoint(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    return f"step {c.get('step')} at {c.get('at')} ({c.get('path')})"


def _gpus(a: dict[str, Any]) -> str:
    if a.get("mig_slices"):
        return f"{a['mig_slices']}/7 MIG"
    if not a.get("gpus") and a.get("gpu_share"):
        return f"{a['gpu_share']:g} of 1"
    return str(a.get("gpus", 0))


def _partition_line(a: dict[str, Any]) -> str | None:
    """How an attempt's GPU share was isolated and used: ``shared, not isolated`` for a
    time-sliced fraction (the ledger's words), the share of SM time used against the
    share given (interference), peak GPU memory against its limit."""
    kind = a.get("isolation")
    if kind is None or kind == "whole":
        return None
    parts = [a.get("isolation_detail") or kind]
    if a.get("isolation_note"):
        parts[0] += f" ({a['isolation_note']})"
    used, given = a.get("gpu_share_used"), a.get("gpu_share_given")
    if given is not None:
        parts.append(f"given {given:g} of a GPU" + (f", used {used:.2f}" if used is not None else ""))
    peak, limit = a.get("peak_gpu_memory_mib"), a.get("gpu_memory_limit_mib")
    if limit is not None:
        parts.append(f"GPU memory peak {peak or 0:.0f} of {limit:.0f} MiB")
    return f"attempt {a['attempt']} node {a['node_rank']}: " + "; ".join(parts)


def _clock(iso: Any) -> str:
    return datetime.fromisoformat(iso).strftime("%H:%M:%S") if iso else "-"


# ---------------------------------------------------------------- commands


def submit(
    files: list[Path] = typer.Argument(..., help="job spec YAML files (one or more specs each)"),
    api: str | None = API,
    dry_run: bool = typer.Option(False, "--dry-run", help="validate only"),
    fmt: Format = OUTPUT,
) -> None:
    """Validate and submit job specs (every problem of every file is reported at once)."""
    from spotfleet.errors import InvalidSpec

    specs = []
    problems: list[str] = []
    for path in files:
        try:
            specs.extend(load_specs(path.read_text(encoding="utf-8"), source=str(path)))
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror}")
        except UnicodeDecodeError:
            problems.append(f"{path}: not UTF-8 text (is it a YAML job spec?)")
        except InvalidSpec as exc:
            problems.extend(exc.lines())
    if problems:
        fail("\n".join(problems))
    if dry_run:
        data = [spec.model_dump(mode="json", exclude_none=True) for spec in specs]
        emit(data, fmt, lambda d, _w: "".join(f"ok: {s['name']}\n" for s in d))
        return
    client = ApiClient(api)
    bodies = [spec.model_dump(mode="json", exclude_none=True) for spec in specs]
    # many specs: one request, one transaction (all or none)
    created = client.post("/v1/jobs/batch", json={"jobs": bodies}) if len(bodies) > 1 else [
        client.post("/v1/jobs", json=bodies[0])]  # fmt: skip
    emit(created, fmt, lambda d, _w: "".join(f"submitted {j['id']} ({j['name']}, {j['priority']})\n" for j in d))


def jobs(
    api: str | None = API,
    state: list[str] = typer.Option([], "--state", "-s", help="filter by state (repeatable)"),
    tenant: str | None = typer.Option(None, "--tenant", help="only this tenant's jobs"),
    fmt: Format = OUTPUT,
    as_json: bool = JSON,
    watch_: bool = WATCH,
    interval: float = INTERVAL,
) -> None:
    """List jobs with their state and progress."""
    client = ApiClient(api)
    params: list[tuple[str, str]] = [("state", s) for s in state] + ([("tenant", tenant)] if tenant else [])

    def fetch() -> Any:
        return client.get("/v1/jobs", params=params)

    _show(fetch, output.resolve(fmt, as_json), jobs_view, watching=watch_, interval=interval)


def job(job_id: str = typer.Argument(...), api: str | None = API, fmt: Format = OUTPUT, as_json: bool = JSON) -> None:
    """Show one job: state, progress, checkpoint, attempts, recent events."""
    emit(ApiClient(api).get(f"/v1/jobs/{job_id}"), output.resolve(fmt, as_json), job_view)


def cancel(
    job_ids: list[str] = typer.Argument(None, help="job ids (or --all / --tenant)"),
    all_: bool = typer.Option(False, "--all", help="cancel every unfinished job"),
    tenant: str | None = typer.Option(None, "--tenant", help="cancel every unfinished job of this tenant"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation (--all / --tenant)"),
    api: str | None = API,
    fmt: Format = OUTPUT,
) -> None:
    """Cancel jobs (a running job is stopped)."""
    client = ApiClient(api)
    ids = list(job_ids or [])
    if (all_ or tenant) and ids:
        fail("give job ids, or --all / --tenant, not both")
    if all_ or tenant:
        params = [("tenant", tenant)] if tenant else []
        ids = [j["id"] for j in client.get("/v1/jobs", params=params) if j["state"] not in TERMINAL]
        scope = f"tenant {tenant}" if tenant else "every tenant"
        if not ids:
            emit([], fmt, lambda _d, _w: f"nothing to cancel ({scope})\n")
            return
        if not yes:
            _confirm(f"cancel {len(ids)} unfinished job(s) of {scope}?")
    elif not ids:
        fail("give one or more job ids, or --all / --tenant")
    done = [client.post(f"/v1/jobs/{job_id}/cancel") for job_id in ids]
    emit(done, fmt, lambda d, _w: "".join(f"cancel requested for {j['id']} (was {j['state']})\n" for j in d))


def instances(
    api: str | None = API,
    all_: bool = typer.Option(False, "--all", help="include terminated"),
    fmt: Format = OUTPUT,
    as_json: bool = JSON,
    watch_: bool = WATCH,
    interval: float = INTERVAL,
) -> None:
    """List instances with their market, price and state."""
    client = ApiClient(api)

    def fetch() -> Any:
        return client.get("/v1/instances", params={"all": str(all_).lower()})

    _show(fetch, output.resolve(fmt, as_json), instances_view, watching=watch_, interval=interval)


def logs(
    job_id: str = typer.Argument(...),
    attempt: int | None = typer.Option(None, "--attempt", help="one attempt (default: every attempt)"),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new output until the job ends"),
    interval: float = typer.Option(1.0, "--interval", min=0.1, help="seconds between polls with --follow"),
    api: str | None = API,
    fmt: Format = OUTPUT,
) -> None:
    """Print a job's stdout/stderr (every attempt, or one); --follow streams it."""
    client = ApiClient(api)
    if follow:
        _follow(client, job_id, attempt=attempt, interval=interval, fmt=fmt)
        return
    if fmt in (Format.table, Format.wide):
        params = {"attempt": attempt} if attempt else {}
        sys.stdout.write(client.request("GET", f"/v1/jobs/{job_id}/logs", params=params).text)
        return
    info = client.get(f"/v1/jobs/{job_id}")
    numbers = [attempt] if attempt else list(range(1, info["attempt"] + 1))
    data = [{"job_id": job_id, "attempt": n, "text": _chunk(client, job_id, n, 0).decode("utf-8", "replace")}
            for n in numbers]  # fmt: skip
    emit(data, fmt)


def _chunk(client: ApiClient, job_id: str, attempt: int, offset: int) -> bytes:
    return client.request("GET", f"/v1/jobs/{job_id}/logs", params={"attempt": attempt, "offset": offset}).content


def _follow(client: ApiClient, job_id: str, *, attempt: int | None, interval: float, fmt: Format) -> None:
    """Poll each attempt's log by byte offset; move to the next attempt when the
    job does; stop once the job has finished and its output is drained."""
    import codecs
    import json

    current = attempt or 1
    offset = 0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    announced = 0
    try:
        while True:
            info = client.get(f"/v1/jobs/{job_id}")
            data = _chunk(client, job_id, current, offset) if current <= max(info["attempt"], 1) else b""
            offset += len(data)
            text = decoder.decode(data)
            if text:
                if fmt in (Format.json, Format.yaml):
                    sys.stdout.write(json.dumps({"job_id": job_id, "attempt": current, "text": text}) + "\n")
                else:
                    if announced != current and attempt is None and info["attempt"] > 1:
                        sys.stdout.write(f"===== attempt {current} =====\n")
                        announced = current
                    sys.stdout.write(text)
                sys.stdout.flush()
                continue  # more may be waiting
            if attempt is None and info["attempt"] > current:
                current, offset = current + 1, 0
                decoder.reset()
                continue
            if info["state"] in TERMINAL or (attempt is not None and info["attempt"] > attempt):
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def events(
    api: str | None = API,
    limit: int = typer.Option(30, "--limit", "-n", help="how many of the newest events"),
    job_id: str | None = typer.Option(None, "--job", help="only this job's events"),
    fmt: Format = OUTPUT,
    watch_: bool = WATCH,
    interval: float = INTERVAL,
) -> None:
    """Recent controller decisions and what happened."""
    client = ApiClient(api)

    def fetch() -> Any:
        if job_id:
            return client.get(f"/v1/jobs/{job_id}")["events"][-limit:]
        return client.get("/v1/events", params={"limit": limit})

    _show(fetch, fmt, events_view, watching=watch_, interval=interval)


def _show(fetch: Any, fmt: Format, view: Any, *, watching: bool, interval: float) -> None:
    if watching:
        watch(fetch, fmt, view, interval=interval)
    else:
        emit(fetch(), fmt, view)


def _confirm(question: str) -> None:
    """Ask on a terminal; refuse (exit 6) when nobody can answer."""
    if not sys.stdin.isatty():
        fail(f"{question} — pass --yes to confirm when not on a terminal", code=ExitCode.INCOMPLETE)
    if not typer.confirm(question, default=False):
        fail("not confirmed; nothing done", code=ExitCode.INCOMPLETE)


def register(app: typer.Typer) -> None:
    for fn in (submit, jobs, job, cancel, instances, logs, events):
        app.command()(fn)
