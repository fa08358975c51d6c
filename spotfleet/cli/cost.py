"""``spotfleet cost``: where every dollar and GPU-hour went.

Design choice: these commands read the store directly (``--db URL`` or
``--config FILE``, resolved exactly like ``spotfleet up``), not the HTTP API.
Cost reports are finance's tool as much as the operator's: they must work
against a PostgreSQL replica or a copied SQLite file with no controller
running, and they read whole tables a JSON API would only page through.

- ``spotfleet cost report [--since 7d|DATE] [--until ...] [--by KEY]... [-o table|wide|json|yaml|csv|focus] [--plot FILE.png]``
- ``spotfleet cost job JOB_ID [-o table|wide|json|yaml]``

``-o`` is the CLI's output option (docs/cli.md); ``--format``/``-f`` are the
same option.
"""

from __future__ import annotations

import csv
import enum
import io
import json
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from spotfleet.cli.client import fail
from spotfleet.cli.exitcodes import ExitCode
from spotfleet.errors import InvalidSpec

if TYPE_CHECKING:
    from spotfleet.ledger.billing import BillingRule
    from spotfleet.ledger.report import Report, Sums
    from spotfleet.store import Store

app = typer.Typer(help="Cost reports from the ledger: who spent what, savings vs on-demand, idle and interruptions.",
                  no_args_is_help=True)  # fmt: skip
DB = typer.Option(None, "--db", help="database URL (default: the config's, else SQLite in the data dir)")
CONFIG = typer.Option(None, "--config", "-c", help="controller config YAML (for its database)")
BILLING = typer.Option(None, "--billing", help="billing rule PROVIDER=MIN_SECONDS or PROVIDER=MIN_SECONDS/INCREMENT, "
                                               "repeatable (default: per second, 60 s minimum)")  # fmt: skip
GROUP_KEYS = ("tenant", "job", "family", "instance-type", "region", "market", "day")
BY_HELP = f"group rows by: {', '.join(GROUP_KEYS)} (repeatable)"


class Format(enum.StrEnum):
    table = "table"
    wide = "wide"
    csv = "csv"
    json = "json"
    yaml = "yaml"
    focus = "focus"


class JobFormat(enum.StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


def parse_when(text: str | None, *, now: datetime) -> datetime | None:
    """``7d``/``12h`` (ago), ``2026-12-01`` (UTC midnight) or an ISO 8601 time."""
    if text is None:
        return None
    from spotfleet.model.durations import parse_duration

    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        if len(text) == 10:
            return datetime.combine(datetime.fromisoformat(text).date(), time(), tzinfo=UTC)
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidSpec("since", f"cannot read {text!r}: write 7d, 12h, 2026-12-01 or 2026-12-01T10:00:00Z") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def open_store(config: Path | None, db: str | None) -> Store:
    from spotfleet.config import load_config
    from spotfleet.store import Store

    cfg = load_config(config, overrides={"database": db})
    store = Store(cfg.database_url)
    with store.reachable():
        current = _schema_current(store)
    if not current:
        store.migrate()  # an older store (or a new file): bring it up, as `spotfleet up` would
    return store


def _schema_current(store: Store) -> bool:
    """True when the store is at the newest Alembic revision: then nothing is
    written, so reports also run against a read-only replica."""
    from importlib import resources

    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(resources.files("spotfleet") / "store" / "migrations"))
    with store.engine.connect() as conn:
        current = set(MigrationContext.configure(conn).get_current_heads())
    return current == set(script.get_heads())


def _rules(specs: list[str] | None) -> Mapping[str, BillingRule] | None:
    if not specs:
        return None
    from spotfleet.ledger.billing import DEFAULT_RULES, parse_rule

    rules = dict(DEFAULT_RULES)
    rules.update(parse_rule(s) for s in specs)
    return rules


def compute_report(store: Store, *, now: datetime, since: datetime | None = None, until: datetime | None = None,
                   by: list[str] | None = None, rules: Mapping[str, BillingRule] | None = None) -> Report:  # fmt: skip
    from spotfleet.ledger.load import build
    from spotfleet.ledger.report import build_report

    cuts = [t for t in (since, until) if t is not None]
    data = build(store, now=now, rules=rules, cuts=cuts)
    return build_report(data.ledger.lines, usage=data.usage, now=now, by=by or [], since=since, until=until)


@app.command("report")
def report_cmd(
    since: str | None = typer.Option(None, "--since", help="7d, 12h, 2026-12-01 or an ISO time (default: all)"),
    until: str | None = typer.Option(None, "--until", help="same forms as --since (default: now)"),
    by: list[str] = typer.Option([], "--by", help=BY_HELP),
    fmt: Format = typer.Option(
        Format.table,
        "--output",
        "-o",
        "--format",
        "-f",
        help="table, wide, json, yaml, csv, or focus (FinOps FOCUS CSV)",
    ),
    plot: Path | None = typer.Option(None, "--plot", help="also write daily spend as a PNG"),
    db: str | None = DB,
    config: Path | None = CONFIG,
    billing: list[str] | None = BILLING,
) -> None:
    """Totals, spot share, savings vs on-demand, idle and interruption cost, $/GPU-hour."""
    for key in by:
        if key not in GROUP_KEYS:
            fail(f"--by {key!r}: choose from {', '.join(GROUP_KEYS)}")
    now = datetime.now(UTC)
    try:
        start, end = parse_when(since, now=now), parse_when(until, now=now)
        rules = _rules(billing)
        store = open_store(config, db)
    except InvalidSpec as exc:
        fail(str(exc))
    try:
        report = compute_report(store, now=now, since=start, until=end, by=by, rules=rules)
    finally:
        store.close()
    sys.stdout.write(render(report, fmt))
    if plot is not None:
        from spotfleet.ledger.plot import daily_spend

        daily_spend(report.lines, plot, by=by[0] if by else "market")
        typer.echo(f"wrote {plot}", err=True)


def render(report: Report, fmt: Format | str) -> str:
    """The report as text in one of the formats (tables are rendered to a string)."""
    fmt = Format(fmt)
    if fmt is Format.json:
        return json.dumps(report.to_dict(), indent=2) + "\n"
    if fmt is Format.yaml:
        import yaml

        return str(yaml.safe_dump(json.loads(json.dumps(report.to_dict())), sort_keys=False))
    if fmt is Format.csv:
        return _csv([report.row_dict(k, s) for k, s in report.rows] if report.by
                    else [{"scope": "total", **report.totals.figures()}])  # fmt: skip
    if fmt is Format.focus:
        from spotfleet.ledger import focus

        return _csv(focus.rows(report.lines), columns=focus.COLUMNS)
    buf = io.StringIO()
    print_report(Console(file=buf, width=Console().width, force_terminal=sys.stdout.isatty()), report)
    return buf.getvalue()


def _csv(rows: list[dict[str, Any]], *, columns: list[str] | None = None) -> str:
    buf = io.StringIO()
    fields = columns or (list(rows[0]) if rows else ["scope"])
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if abs(value) >= 1 or value == 0 else f"${value:,.4f}"


def print_report(console: Console, report: Report, *, title: str = "cost report") -> None:
    t = report.totals.figures()
    window = f"{(report.since or 'beginning')} → {(report.until or 'now')}"
    head = Table(title=f"{title} — {window}", show_header=False, title_justify="left", box=box.SIMPLE, pad_edge=False)
    head.add_column("", style="bold")
    head.add_column("", justify="right")
    head.add_column("", style="dim")
    head.add_row("spent", _money(t["cost"]), f"{report.instances} instances, {report.jobs} jobs")
    head.add_row("on spot", f"{t['spot_share_pct']:.1f}%", _money(t["spot_cost"]))
    head.add_row("on-demand would be", _money(t["on_demand_equivalent"]), "same instance-hours, on-demand prices")
    head.add_row("[green]saved[/]", f"[green]{_money(t['savings'])}[/]", f"{t['savings_pct']:.1f}%")
    head.add_row("[yellow]idle[/] (paid, no job)", f"[yellow]{_money(t['idle_cost'])}[/]",
                 f"incl. billing minimums {_money(t['billing_minimum_cost'])}")  # fmt: skip
    head.add_row("[red]interruptions[/]", f"[red]{_money(t['interruption_cost'])}[/]",
                 f"restart {_money(t['restart_overhead_cost'])} + redone {_money(t['redone_work_cost'])}")  # fmt: skip
    head.add_row("failed attempts", _money(t["failed_attempts_cost"]), "exited non-zero, and their retries' start-up")
    head.add_row("startup overhead", _money(t["startup_cost"]), "bind → first progress")
    if report.gpu_samples:
        head.add_row("GPUs idle while bound", _money(t["gpu_idle_while_bound_cost"]), "held, under 5% busy (NVML)")
    else:
        head.add_row("GPUs idle while bound", "n/a", "no GPU telemetry (no NVIDIA driver)")
    head.add_row("$/GPU-hour effective", _money(t["usd_per_gpu_hour_effective"]),
                 f"paid {_money(t['usd_per_gpu_hour_paid'])}; {t['gpu_hours_used']:.3f} of {t['gpu_hours_paid']:.3f} GPU-h used")  # fmt: skip
    console.print(head)
    if report.by:
        console.print(_group_table(report, console.width))


def _group_table(report: Report, width: int) -> Table:
    """Money columns never wrap; on a narrow terminal the least-needed columns go first."""
    table = Table(title=f"by {' × '.join(report.by)}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)  # fmt: skip
    cols = ["SPENT", "ON-DEMAND", "SAVED", "IDLE", "INTERRUPT", "GPU-H", "$/GPU-H"]
    if width < 100:
        cols.remove("$/GPU-H")
    if width < 90:
        cols.remove("GPU-H")
    for i, key in enumerate(report.by):
        longest = max([len(key), *(len(k[i]) for k, _ in report.rows)])
        table.add_column(key.upper(), overflow="fold", min_width=min(longest, 14))
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for keys, sums in report.rows:
        table.add_row(*keys, *_cells(sums, cols))
    table.add_section()
    table.add_row("total", *[""] * (len(report.by) - 1), *_cells(report.totals, cols), style="bold")
    return table


def _cells(sums: Sums, cols: list[str]) -> list[str]:
    f = sums.figures()
    cells = {
        "SPENT": _money(f["cost"]), "ON-DEMAND": _money(f["on_demand_equivalent"]),
        "SAVED": f"{f['savings_pct']:.0f}%", "IDLE": _money(f["idle_cost"]),
        "INTERRUPT": _money(f["interruption_cost"]), "GPU-H": f"{f['gpu_hours_paid']:.3f}",
        "$/GPU-H": _money(f["usd_per_gpu_hour_paid"]),
    }  # fmt: skip
    return [cells[c] for c in cols]


@app.command("job")
def job_cmd(
    job_id: str = typer.Argument(..., help="job id"),
    fmt: JobFormat = typer.Option(
        JobFormat.table, "--output", "-o", "--format", "-f", help="table, wide, json or yaml"
    ),
    db: str | None = DB,
    config: Path | None = CONFIG,
    billing: list[str] | None = BILLING,
) -> None:
    """One job's cost per attempt: where it ran, how long, what it cost, what interruptions cost it."""
    from spotfleet.errors import NotFound
    from spotfleet.ledger.load import build
    from spotfleet.ledger.report import job_breakdown
    from spotfleet.ledger.usage import job_gpu_usage

    now = datetime.now(UTC)
    try:
        rules = _rules(billing)
        store = open_store(config, db)
    except InvalidSpec as exc:
        fail(str(exc))
    try:
        try:
            job = store.get_job(job_id)
        except NotFound as exc:
            fail(str(exc), code=ExitCode.NOT_FOUND)
        data = build(store, now=now, rules=rules)
        attempts = job_breakdown(data.ledger.lines, job_id, usage=data.usage)
        gpu = job_gpu_usage(store, job_id)
    finally:
        store.close()
    if fmt in (JobFormat.json, JobFormat.yaml):
        from spotfleet.cli.output import Format as OutputFormat
        from spotfleet.cli.output import emit
        from spotfleet.ledger.report import Sums

        total = Sums()
        for ln in data.ledger.lines:
            if ln.job_id == job_id:
                total.add(ln)
        out = {"job_id": job.id, "name": job.spec.name, "tenant": job.spec.tenant, "state": job.state.value,
               "totals": total.figures(), "gpu": gpu, "attempts": [a.to_dict() for a in attempts]}  # fmt: skip
        emit(out, OutputFormat(fmt.value))
        return
    console = Console()
    table = Table(title=f"{job.id} ({job.spec.name}, tenant {job.spec.tenant}) — {job.state.value}",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)  # fmt: skip
    for col in ("#", "WHERE", "HELD", "OUTCOME", "SPENT", "OVERHEAD", "REDONE", "ON-DEMAND"):
        if col in ("WHERE", "OUTCOME"):
            table.add_column(col, overflow="fold")
        else:
            table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    from spotfleet.model.durations import format_duration

    gpu_lines = []
    for a in attempts:
        f = a.sums.figures()
        label = f"{a.attempt}" + (f".{a.node_rank}" if a.node_rank else "")
        table.add_row(
            label, f"{a.instance_type} {a.market}", format_duration((a.ended_at or now) - a.bound_at),
            a.outcome or "running", _money(f["cost"]), _money(a.overhead / 1e6), _money(f["redone_work_cost"]),
            _money(f["on_demand_equivalent"]),
        )  # fmt: skip
        u = a.usage
        if u is not None and u.gpu_samples:
            gpu_lines.append(f"attempt {label} on {a.instance_id} ({a.zone}): peak GPU memory "
                             f"{u.peak_gpu_memory_mib / 1024:.1f} GiB, mean utilisation {u.mean_utilization_pct or 0:.0f}%")  # fmt: skip
        if u is not None and u.isolation is not None and u.isolation != "whole":
            note = f" ({u.isolation_note})" if u.isolation_note else ""
            gpu_lines.append(
                f"attempt {label} billed as a {u.given_share or 0:g} GPU share: {u.isolation_phrase}{note}"
            )
    console.print(table)
    spent = sum(a.sums.cost for a in attempts)
    od = sum(a.sums.on_demand for a in attempts)
    lost = sum(a.sums.restart + a.sums.redone for a in attempts)
    for line in gpu_lines:
        console.print(line)
    console.print(f"total {_money(spent / 1e6)} (on-demand {_money(od / 1e6)}); interruptions cost "
                  f"{_money(lost / 1e6)} over {job.interruptions} interruption(s)")  # fmt: skip
