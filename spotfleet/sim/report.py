"""Summaries of a simulation: the table, the JSON document and the timeline plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from spotfleet.model.offering import Market
from spotfleet.sim.engine import SimResult
from spotfleet.sim.traces import TraceSet
from spotfleet.sim.workload import Workload


def gpus_by_type(traces: TraceSet) -> dict[str, int]:
    """GPUs per instance for every type the simulation may buy."""
    from spotfleet.catalog import load_catalog

    table = {o.instance_type: o.gpu_count for o in load_catalog()}
    table.update({z.instance_type: z.gpus_per_instance for z in traces.zones})
    return table


def gpu_hours_used(result: SimResult, workload: Workload) -> float:
    """Useful GPU-hours: work kept (not redone) × GPUs of every node."""
    by_name = {item.spec.name: item for item in workload.items}
    total = 0.0
    for job in result.jobs:
        item = by_name[job.name]
        r = item.spec.resources
        total += job.done_seconds / 3600.0 * max(r.gpus, 1) * r.nodes
    return total


def summary(result: SimResult, *, traces: TraceSet, workload: Workload) -> dict[str, Any]:
    """The ``--json`` document: figures, jobs, instances, and what a timeline needs
    (``curves``: cumulative cost against the on-demand line; ``spot_available``:
    when each zone had spot capacity) — the dashboard's what-if page draws these."""
    gpus = gpus_by_type(traces)
    doc = result.to_dict(gpus_of=gpus, gpu_hours_used=gpu_hours_used(result, workload))
    doc["curves"] = cost_curves(result)
    doc["spot_available"] = spot_windows(traces, result)
    return doc


def cost_curves(result: SimResult, *, max_points: int = 2000) -> list[dict[str, Any]]:
    """Cumulative cost and the on-demand reference at the same instants (thinned
    evenly to ``max_points``, keeping the last point so the totals show)."""
    curve = result.cost_curve
    step = max(1, -(-len(curve) // max_points))
    picked = curve[::step]
    if curve and picked[-1] is not curve[-1]:
        picked.append(curve[-1])
    return [
        {"at": t.isoformat(), "cost": round(c, 4), "on_demand": round(result.on_demand_spent(t), 4)} for t, c in picked
    ]


def spot_windows(traces: TraceSet, result: SimResult) -> dict[str, list[list[str]]]:
    """Per zone, the [start, end) windows within the run when spot capacity was > 0."""
    first = max(traces.tick_at(result.start), 0)
    last = min(traces.tick_at(result.end) + 1, traces.n_ticks)
    out: dict[str, list[list[str]]] = {}
    for z in traces.zones:
        windows: list[list[str]] = []
        open_at: int | None = None
        for k in range(first, last + 1):
            up = k < last and z.available[k] > 0
            if up and open_at is None:
                open_at = k
            elif not up and open_at is not None:
                windows.append([traces.time_of(open_at).isoformat(), traces.time_of(k).isoformat()])
                open_at = None
        out[z.zone] = windows
    return out


def summary_table(doc: dict[str, Any]) -> Table:
    table = Table(title=f"simulated under policy {doc['policy']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    saving = 1 - doc["cost"] / doc["on_demand_cost"] if doc["on_demand_cost"] else 0.0
    # the share of what was paid for that became kept work (restarts, idle and
    # redone work are the rest): issue 12 asks for >= 90 % on the example workload
    utilization = doc["gpu_hours_used"] / doc["gpu_hours_paid"] if doc["gpu_hours_paid"] else 0.0
    rows = [
        ("from", doc["start"][:16]),
        ("to", doc["end"][:16]),
        ("cost (USD)", f"{doc['cost']:,.2f}"),
        ("same work on on-demand (USD)", f"{doc['on_demand_cost']:,.2f}"),
        ("saving vs on-demand", f"{saving:.1%}"),
        ("jobs", str(len(doc["jobs"]))),
        ("deadline misses", str(doc["deadline_misses"])),
        ("unfinished", str(doc["unfinished"])),
        ("spot share (instance-hours)", f"{doc['spot_share']:.1%}"),
        ("interruptions", str(doc["interruptions"])),
        ("GPU-hours paid", f"{doc['gpu_hours_paid']:,.1f}"),
        ("GPU-hours used", f"{doc['gpu_hours_used']:,.1f}"),
        ("GPU-hours used / paid", f"{utilization:.1%}"),
        ("controller steps", str(doc["steps"])),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def jobs_table(doc: dict[str, Any]) -> Table:
    table = Table(title="jobs")
    for col in (
        "job",
        "state",
        "arrival",
        "finished",
        "deadline",
        "starts",
        "interruptions",
        "lost h",
    ):
        table.add_column(col)
    for j in doc["jobs"]:
        late = " (late)" if j["missed_deadline"] else ""
        table.add_row(
            j["name"], j["state"], j["arrival"][5:16], (j["finished_at"] or "-")[5:16] + late,
            (j["deadline"] or "-")[5:16], str(j["starts"]), str(j["interruptions"]), f"{j['lost_hours']:.2f}",
        )  # fmt: skip
    return table


def plot_timeline(result: SimResult, traces: TraceSet, path: Path | str) -> None:
    """Market per zone over time (grey: spot available) and cumulative cost vs on-demand."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    zones = sorted({b.zone for b in result.bills} | {z.zone for z in traces.zones})
    row = {zone: i for i, zone in enumerate(zones)}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 3 + 0.35 * len(zones)), sharex=True,
                                      gridspec_kw={"height_ratios": [max(len(zones), 2), 2]})  # fmt: skip
    t0 = result.start

    def hours(when: Any) -> float:
        return float((when - t0).total_seconds() / 3600.0)

    span = hours(result.end)
    first = max(traces.tick_at(result.start), 0)
    last = min(traces.tick_at(result.end) + 1, traces.n_ticks)
    for z in traces.zones:
        y = row[z.zone]
        for k in range(first, last):
            if z.available[k] > 0:
                a, b = hours(traces.time_of(k)), hours(traces.time_of(k + 1))
                top.barh(y, b - a, left=a, height=0.8, color="#e6e6e6", linewidth=0)
    colors = {Market.SPOT: "#2a9d8f", Market.ON_DEMAND: "#e76f51"}
    for bill in result.bills:
        a = hours(bill.launched_at)
        b = hours(bill.ended_at or result.end)
        top.barh(row[bill.zone], b - a, left=a, height=0.5, color=colors[bill.market])
        if bill.reclaimed:
            top.plot([b], [row[bill.zone]], marker="x", color="black")
    top.set_yticks(range(len(zones)), zones)
    top.set_title(f"{result.policy}: spot (green), on-demand (orange), spot available (grey), reclaim (x)")
    xs = [hours(t) for t, _ in result.cost_curve]
    top.set_xlim(0, max(span, 1e-6))
    bottom.step(
        xs,
        [c for _, c in result.cost_curve],
        where="post",
        label=f"{result.policy} (${result.cost:,.0f})",
    )
    times = [t for t, _ in result.cost_curve]
    bottom.plot(xs, [result.on_demand_spent(t) for t in times], linestyle="--", color="#e76f51",
                label=f"same work on on-demand (${result.on_demand_cost:,.0f})")  # fmt: skip
    bottom.set_xlabel("hours since start")
    bottom.set_ylabel("cumulative USD")
    bottom.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
