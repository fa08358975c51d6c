"""``spotfleet simulate``: what would this workload have cost under this policy?

Replays spot traces (one JSON file per zone; several directories at once)
against the real controller and the chosen policy, and prints cost, deadline
misses, spot share, interruptions and GPU-hours paid vs used. ``--json`` writes
the full result, ``--plot`` a timeline (market per zone, cumulative cost vs the
on-demand line). See docs/simulator.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from spotfleet.sim.traces import TraceSet
    from spotfleet.sim.workload import Workload


def simulate(
    traces: Annotated[
        list[Path],
        typer.Option("--traces", help="trace directory or file (repeat, or list several after it)"),
    ],
    workload: Annotated[Path, typer.Option("--workload", help="workload YAML (see examples/workload.yaml)")],
    more: Annotated[list[Path] | None, typer.Argument(metavar="[DIR ...]", help="more trace directories")] = None,
    policy: Annotated[
        str,
        typer.Option("--policy", help="on-demand | greedy | uniform-progress | spotfleet | optimal"),
    ] = "spotfleet",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the full result as JSON here")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="write a timeline PNG here")] = None,
    align: Annotated[
        str,
        typer.Option("--align", help="time: traces at their start_time; start: all from tick 0"),
    ] = "time",
    checkpoint_seconds: Annotated[
        float,
        typer.Option("--checkpoint-seconds", help="time a job needs to checkpoint on a notice"),
    ] = 30.0,
) -> None:
    """Simulate a workload on spot traces under one policy."""
    from rich.console import Console

    from spotfleet.errors import InvalidSpec
    from spotfleet.sim import report
    from spotfleet.sim.engine import SimSettings, Simulation
    from spotfleet.sim.scenario import make_policy
    from spotfleet.sim.traces import load_traces
    from spotfleet.sim.workload import load_workload

    console = Console(width=None if sys.stdout.isatty() else 120)
    if align not in ("time", "start"):
        raise typer.BadParameter("use time or start", param_hint="--align")
    try:
        trace_set = load_traces([*traces, *(more or [])], align=align)  # type: ignore[arg-type]
        load = load_workload(workload, trace_set)
        if policy == "optimal":
            _optimal(console, trace_set, load, json_out)
            return
        settings = SimSettings(restart_seconds=load.restart_seconds, checkpoint_seconds=checkpoint_seconds)
        planner = make_policy(
            policy,
            restart_hours=load.restart_seconds / 3600,
            tick_hours=trace_set.tick_seconds / 3600,
        )
        sim = Simulation(trace_set, load.items, planner, start=load.start, end=load.horizon(), settings=settings)
        result = sim.run()
    except InvalidSpec as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    doc = report.summary(result, traces=trace_set, workload=load)
    console.print(report.summary_table(doc))
    console.print(report.jobs_table(doc))
    if json_out is not None:
        json_out.write_text(json.dumps(doc, indent=2))
        console.print(f"wrote {json_out}")
    if plot is not None:
        report.plot_timeline(result, trace_set, plot)
        console.print(f"wrote {plot}")


def _optimal(console: Console, trace_set: TraceSet, load: Workload, json_out: Path | None) -> None:
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
    console.print(f"optimal cost ${result.cost:,.2f}, done {result.finish_seconds / 3600:.2f} h after the start")
    for seg in schedule:
        console.print(
            f"  ticks {seg['start_tick']}–{seg['end_tick']}: {seg['market']} in {seg['zone']} ({seg['hours']} h, ${seg['cost']})"
        )
    if json_out is not None:
        json_out.write_text(json.dumps(doc, indent=2))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
