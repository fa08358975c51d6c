"""``spotfleet simulate``: what would this workload have cost under this policy?

Replays spot traces (one JSON file per zone; several directories at once)
against the real controller and the chosen policy, and prints cost, deadline
misses, spot share, interruptions and GPU-hours paid vs used. ``-o json|yaml``
prints the full result instead of the tables, ``--json-out PATH`` writes it to
a file, ``--plot`` draws a timeline (market per zone, cumulative cost vs the
on-demand line). ``builtin:NAME`` names a trace set or workload bundled with the
package (``spotfleet.sim.builtin``). See docs/simulator.md.

The simulator needs numpy (``pip install 'spotfleet[sim]'``), ``--plot`` needs
matplotlib (``[plot]``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spotfleet.cli import output
from spotfleet.cli.output import Format

if TYPE_CHECKING:
    from rich.console import Console

    from spotfleet.sim.traces import TraceSet
    from spotfleet.sim.workload import Workload


TRACES_HELP = "trace directory or file, or builtin:gcp-h100 | builtin:aws-v100 | ... (repeat, or list several after it)"
WORKLOAD_HELP = "workload YAML (see examples/workload.yaml), or builtin:fleet | builtin:deadline"


def simulate(
    traces: Annotated[list[str], typer.Option("--traces", help=TRACES_HELP)],
    workload: Annotated[str, typer.Option("--workload", help=WORKLOAD_HELP)],
    more: Annotated[list[str] | None, typer.Argument(metavar="[DIR ...]", help="more trace directories")] = None,
    policy: Annotated[
        str,
        typer.Option("--policy", help="on-demand | greedy | uniform-progress | ups | spotfleet | optimal"),
    ] = "spotfleet",
    fmt: Format = output.OUTPUT,
    json_out: Annotated[Path | None, typer.Option("--json-out", help="also write the full result as JSON here")] = None,
    json_legacy: Annotated[Path | None, typer.Option("--json", hidden=True, help="same as --json-out")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write a timeline PNG here (needs [plot])")] = None,
    align: Annotated[
        str,
        typer.Option("--align", help="time: traces at their start_time; start: all from tick 0"),
    ] = "time",
    checkpoint_seconds: Annotated[
        float,
        typer.Option("--checkpoint-seconds", help="time a job needs to checkpoint on a notice"),
    ] = 30.0,
    history_hours: Annotated[
        float,
        typer.Option(
            "--history-hours",
            min=0.0,
            help="hours of the traces before the workload's start the controller has already watched "
            "(learned spot run lengths); 0: it starts with the workload",
        ),
    ] = 0.0,
) -> None:
    """Simulate a workload on spot traces under one policy (bundled samples: --traces builtin:gcp-h100)."""
    from rich.console import Console

    from spotfleet.extras import requires
    from spotfleet.sim.builtin import resolve_traces, resolve_workload

    json_out = json_out or json_legacy
    if align not in ("time", "start"):
        raise typer.BadParameter("use time or start", param_hint="--align")
    trace_paths = [resolve_traces(t) for t in [*traces, *(more or [])]]
    workload_path = resolve_workload(workload)
    with requires("sim", "the simulator"):
        from spotfleet.sim import report
        from spotfleet.sim.engine import SimSettings, Simulation
        from spotfleet.sim.scenario import make_policy
        from spotfleet.sim.traces import load_traces
        from spotfleet.sim.workload import load_workload

    console = Console(width=None if sys.stdout.isatty() else 120)
    trace_set = load_traces(trace_paths, align=align)  # type: ignore[arg-type]
    load = load_workload(workload_path, trace_set)
    if policy == "optimal":
        _optimal(console, trace_set, load, json_out, fmt)
        return
    settings = SimSettings(restart_seconds=load.restart_seconds, checkpoint_seconds=checkpoint_seconds,
                           history_hours=history_hours)  # fmt: skip
    planner = make_policy(
        policy,
        restart_hours=load.restart_seconds / 3600,
        tick_hours=trace_set.tick_seconds / 3600,
    )
    sim = Simulation(trace_set, load.items, planner, start=load.start, end=load.horizon(), settings=settings)
    result = sim.run()
    doc = report.summary(result, traces=trace_set, workload=load)
    if fmt in (Format.json, Format.yaml):
        output.emit(doc, fmt)
    else:
        console.print(report.summary_table(doc))
        console.print(report.jobs_table(doc))
    if json_out is not None:
        json_out.write_text(json.dumps(doc, indent=2))
        typer.echo(f"wrote {json_out}", err=True)
    if plot is not None:
        with requires("plot", "--plot"):
            report.plot_timeline(result, trace_set, plot)
        typer.echo(f"wrote {plot}", err=True)


def _optimal(console: Console, trace_set: TraceSet, load: Workload, json_out: Path | None, fmt: Format) -> None:
    """``--policy optimal``: the omniscient bound, for a one-job workload with a deadline."""
    from spotfleet.errors import InvalidSpec
    from spotfleet.sim.optimal import optimal_single_job

    if len(load.items) != 1 or load.items[0].spec.deadline is None:
        raise InvalidSpec("policy", "optimal is defined for one job with a deadline (scenario a)")
    item = load.items[0]
    assert item.spec.deadline is not None
    start_tick = trace_set.tick_at(item.arrival)
    result = optimal_single_job(
        trace_set,
        work_hours=item.work_seconds / 3600,
        deadline_hours=(item.spec.deadline - trace_set.time_of(start_tick)).total_seconds() / 3600,
        start_tick=start_tick,
        restart_hours=load.restart_seconds / 3600,
        nodes=item.spec.resources.nodes,
    )
    schedule: list[dict[str, Any]] = [
        {"zone": s.zone, "market": s.market.value if s.market else None, "start_tick": s.start_tick,
         "end_tick": s.end_tick, "hours": round(s.seconds / 3600, 4), "cost": round(s.cost, 4)}
        for s in result.schedule
    ]  # fmt: skip
    doc = {
        "policy": "optimal",
        "feasible": result.feasible,
        "cost": round(result.cost, 4) if result.feasible else None,
        "finish_hours": round(result.finish_seconds / 3600, 4) if result.feasible else None,
        "schedule": schedule,
    }
    if fmt in (Format.json, Format.yaml):
        output.emit(doc, fmt)
    else:
        console.print(f"optimal cost ${result.cost:,.2f}, done {result.finish_seconds / 3600:.2f} h after the start")
        for seg in schedule:
            console.print(f"  ticks {seg['start_tick']}–{seg['end_tick']}: {seg['market']} in {seg['zone']} "
                          f"({seg['hours']} h, ${seg['cost']})")  # fmt: skip
    if json_out is not None:
        json_out.write_text(json.dumps(doc, indent=2))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
