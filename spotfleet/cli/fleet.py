"""Fleet-wide verbs: ``status`` (the operator's overview), ``down`` and ``resume``.

``status`` reads ``GET /v1/summary``; the controller's role and health come from
``/healthz`` when that endpoint says (a controller with leader election reports
``role``), else from the summary, else "single" — an older controller still
gets a useful status.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import typer

from spotfleet.cli import output
from spotfleet.cli.client import ApiClient, fail
from spotfleet.cli.exitcodes import ExitCode
from spotfleet.cli.jobs import API, INTERVAL, OUTPUT, WATCH, _confirm
from spotfleet.cli.output import Column, Format, TableView
from spotfleet.cli.watch import watch


def fetch_status(client: ApiClient) -> dict[str, Any]:
    summary: dict[str, Any] = client.get("/v1/summary")
    health = client.try_get("/healthz") or {}
    controller = dict(summary.get("controller") or {})
    controller.setdefault("role", "single")
    for key in ("role", "leader", "leader_url", "epoch", "health"):  # the health endpoint knows best, when it says
        if key in health:
            controller[key] = health[key]
    controller["url"] = client.url
    summary["controller"] = controller
    return summary


def _money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if abs(value) >= 1 or value == 0 else f"${value:,.4f}"


def status_sections(data: dict[str, Any], wide: bool) -> list[tuple[str, TableView]]:
    c = data.get("controller") or {}
    total = data.get("total_dollars", 0.0)
    od = data.get("on_demand_equivalent", 0.0)
    saved = data.get("savings", 0.0)
    head_rows = [
        ("controller", f"{c.get('url', '-')} — role {c.get('role', 'single')}, health {c.get('health', 'unknown')}"),
        *([("leader", f"{c['leader']} at {c.get('leader_url') or '?'} (epoch {c.get('epoch')})")]
          if c.get("leader") else []),
        ("cluster", f"{c.get('cluster', '-')} (spotfleet {c.get('version', '?')})"),
        ("last step", f"{c.get('last_step_at') or 'none yet'}" + (f" — error: {c['last_step_error']}"
                                                                   if c.get("last_step_error") else "")),
        ("spend rate", f"{_money(data.get('rate_per_hour', 0.0))}/h"),
        ("spent so far", f"{_money(total)} (on-demand would be {_money(od)}; saved {_money(saved)}"
                         f"{f', {100 * saved / od:.0f}%' if od else ''})"),
    ]  # fmt: skip
    down = data.get("down")
    if down:
        head_rows.append(("FLEET DOWN", f"since {down['since']} ({down['reason']}): `spotfleet resume` to buy again"))
    head = TableView([Column("", lambda r: r[0]), Column("", lambda r: r[1])], head_rows)
    fleet = TableView(
        [
            Column("PROVIDER", lambda r: r["provider"]),
            Column("MARKET", lambda r: r["market"]),
            Column("REGION", lambda r: r.get("region"), wide_only=True),
            Column("ZONE", lambda r: r["zone"]),
            Column("INSTANCES", lambda r: r["instances"], justify="right"),
            Column("GPUS", lambda r: r["gpus"], justify="right"),
            Column("$/H", lambda r: f"{r['rate_per_hour']:.3f}", justify="right"),
            Column("STATES", lambda r: ", ".join(f"{n} {s}" for s, n in sorted(r.get("states", {}).items()))),
        ],
        data.get("fleet", []),
    )
    states = sorted({s for counts in data.get("jobs_by_tenant", {}).values() for s in counts})
    tenants = TableView(
        [Column("TENANT", lambda r: r[0])]
        + [Column(s.upper(), _state_count(s), justify="right") for s in states]
        + [Column("$/H", lambda r: f"{data.get('tenant_rates_per_hour', {}).get(r[0], 0.0):.3f}", justify="right")],
        sorted(data.get("jobs_by_tenant", {}).items()),
    )
    budgets = TableView(
        [
            Column("BUDGET", lambda b: b["scope"]),
            Column("RATE $/H", lambda b: f"{b['rate_per_hour']:.3f}", justify="right"),
            Column("CAP $/H", lambda b: f"{b['cap_per_hour']:.2f}", justify="right"),
            Column(
                "USED",
                lambda b: f"{b['used_pct']:.0f}%" if b.get("used_pct") is not None else "-",
                justify="right",
                style=lambda b: "red" if (b.get("used_pct") or 0) >= 90 else "",
            ),
        ],
        data.get("budgets", []),
    )
    events = TableView(
        [
            Column("AT", lambda e: e["at"][11:19] if not wide else e["at"]),
            Column("LEVEL", lambda e: e["level"]),
            Column("MESSAGE", lambda e: e["message"] if wide else e["message"][:110]),
        ],
        data.get("events", []),
    )
    sections = [("", head), ("fleet by provider / market / zone", fleet), ("jobs by tenant and state", tenants)]
    if data.get("budgets"):
        sections.append(("budgets (spend rate vs cap)", budgets))
    sections.append(("recent notable events", events))
    return sections


def _state_count(state: str) -> Callable[[Any], Any]:
    return lambda row: row[1].get(state, 0)


def status_view(data: dict[str, Any], wide: bool) -> Any:
    sections = status_sections(data, wide)
    if not output.is_tty():
        parts = []
        for title, table in sections:
            body = table.plain(wide=wide) if table.rows else "(none)\n"
            parts.append((f"{title}\n" if title else "") + body)
        return "\n".join(parts)
    from rich.console import Group
    from rich.text import Text

    items: list[Any] = []
    for title, table in sections:
        if title:
            items.append(Text(title, style="bold"))
        items.append(table.rich(wide=wide) if table.rows else Text("(none)", style="dim"))
    return Group(*items)


def status(api: str | None = API, fmt: Format = OUTPUT, watch_: bool = WATCH, interval: float = INTERVAL) -> None:
    """Controller health, fleet by provider/market/zone, jobs by tenant, spend vs budgets, savings, recent events."""
    client = ApiClient(api)
    if watch_:
        watch(lambda: fetch_status(client), fmt, status_view, interval=interval)
    else:
        output.emit(fetch_status(client), fmt, status_view)


def down(
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    grace: float = typer.Option(120.0, "--grace", min=0, help="seconds jobs get to checkpoint before they are stopped"),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="wait until every instance is given back"),
    timeout: float = typer.Option(900.0, "--timeout", help="give up waiting after this many seconds (exit 6)"),
    api: str | None = API,
    fmt: Format = OUTPUT,
) -> None:
    """Take the fleet down: cordon everything, drain jobs with a checkpoint, give back every instance.

    Jobs keep their checkpoints and wait (pending); nothing is bought until
    `spotfleet resume`. The controller keeps running."""
    client = ApiClient(api)
    live = client.get("/v1/instances")
    running = [j for j in client.get("/v1/jobs") if j["state"] in ("bound", "running", "draining")]
    if not yes:
        _confirm(f"take the fleet down: drain {len(running)} job(s) and give back {len(live)} instance(s)?")
    answer = client.post("/v1/fleet/down", json={"grace_seconds": grace})
    if fmt in (Format.table, Format.wide):
        typer.echo(f"fleet going down: {len(running)} job(s) checkpoint within {grace:g}s, "
                   f"{answer['instances']} instance(s) to give back")  # fmt: skip
    deadline = time.monotonic() + timeout
    remaining = live
    while wait and remaining:
        if time.monotonic() > deadline:
            fail(f"{len(remaining)} instance(s) still live after {timeout:g}s: "
                 f"{', '.join(i['id'] for i in remaining)}", code=ExitCode.INCOMPLETE)  # fmt: skip
        time.sleep(1.0)
        now_live = client.get("/v1/instances")
        if fmt in (Format.table, Format.wide) and len(now_live) != len(remaining):
            typer.echo(f"  {len(now_live)} instance(s) left")
        remaining = now_live
    result = {**answer, "remaining_instances": len(remaining), "waited": wait}
    output.emit(
        result,
        fmt,
        lambda d, _w: (
            "fleet is down: every instance given back; `spotfleet resume` to buy again\n"
            if wait
            else "down requested; `spotfleet status` to follow\n"
        ),
    )


def resume(api: str | None = API, fmt: Format = OUTPUT) -> None:
    """Lift `spotfleet down`: pending jobs are placed and capacity is bought again."""
    answer = ApiClient(api).post("/v1/fleet/resume")
    output.emit(answer, fmt, lambda d, _w: "fleet resumed\n" if d["resumed"] else "the fleet was not down\n")


def register(app: typer.Typer) -> None:
    app.command()(status)
    app.command()(down)
    app.command()(resume)
