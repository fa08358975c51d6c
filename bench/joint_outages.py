"""Do a market's zones go down together? Joint outages against independent ones.

When a deadline job weighs waiting for several cheaper pools that are all
down (``SpotfleetPolicy._cheaper_pool_wait``), it expects the first of them
back after ``1 / Σ 1/mean_down``: each pool's down run an exponential of its
own mean, the pools independent. If zones of a cloud go down together, the
first one back comes later than that, and the wait is underestimated.

This bench measures how far off that is on any trace set. For every subset of
``k`` zones it finds the runs during which all of them were down at once (the
joint outages that ended inside the traces), and divides their mean length by
the independent prediction from the zones' own mean down runs. A ratio of 1:
independent; 2: the first zone back comes twice as late as independence says.
Per ``k``: how many subsets had at least ``--min-runs`` joint outages, and the
median, mean, smallest and largest ratio over them.

    python bench/joint_outages.py ../shared/data/traces/gcp-h100-2025-10 ../shared/data/traces/aws-v100-2023-02

Each directory is one set (its zones on a common grid, as the simulator reads
them: down = no instance can be had). Prints a table per set and one JSON line
per set.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from spotfleet.errors import InvalidSpec
from spotfleet.sim.traces import load_traces, up_runs


def down_runs(up: np.ndarray, tick_hours: float) -> list[float]:
    """Lengths (hours) of the down runs of a boolean up-series that ended inside it."""
    return up_runs((~up).astype(int).tolist(), tick_hours)


def joint_ratios(zones: dict[str, np.ndarray], tick_hours: float, k: int, min_runs: int) -> list[float]:
    """For every ``k``-subset of ``zones`` (name → boolean up-series on one grid)
    with at least ``min_runs`` joint outages: their mean length over the
    independent prediction ``1 / Σ 1/mean_down``."""
    mean_down = {}
    for name, up in zones.items():
        runs = down_runs(up, tick_hours)
        if runs:
            mean_down[name] = statistics.fmean(runs)
    ratios = []
    for subset in itertools.combinations(sorted(mean_down), k):
        independent = 1.0 / sum(1.0 / mean_down[name] for name in subset)
        any_up = np.zeros_like(zones[subset[0]])
        for name in subset:
            any_up |= zones[name]
        joint = down_runs(any_up, tick_hours)
        if len(joint) >= min_runs:
            ratios.append(statistics.fmean(joint) / independent)
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", type=Path, help="trace directories, one set each")
    parser.add_argument("--sizes", nargs="+", type=int, default=[2, 3, 4], help="subset sizes k (default 2 3 4)")
    parser.add_argument("--min-runs", type=int, default=3,
                        help="joint outages a subset needs to count (default 3)")  # fmt: skip
    args = parser.parse_args(argv)
    if any(k < 2 for k in args.sizes):
        parser.error("--sizes: each k must be at least 2 (a subset of one zone is that zone)")
    for folder in args.sets:
        try:
            traces = load_traces([folder])
        except InvalidSpec as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        tick_hours = traces.tick_seconds / 3600.0
        zones = {z.zone: np.asarray(z.available) > 0 for z in traces.zones}
        print(f"{folder} ({len(zones)} zones, {traces.n_ticks} ticks of {traces.tick_seconds:.0f} s)")
        print(
            f"  {'k':>2} {'subsets':>8} {'median':>7} {'mean':>6} {'min':>6} {'max':>6}  joint / independent mean down run"
        )
        row: dict[str, object] = {"set": str(folder), "zones": len(zones)}
        for k in args.sizes:
            if k > len(zones):
                continue
            ratios = joint_ratios(zones, tick_hours, k, args.min_runs)
            if not ratios:
                print(f"  {k:>2} {0:>8}")
                continue
            summary = {"subsets": len(ratios), "median": round(statistics.median(ratios), 3),
                       "mean": round(statistics.fmean(ratios), 3), "min": round(min(ratios), 3),
                       "max": round(max(ratios), 3)}  # fmt: skip
            row[f"k{k}"] = summary
            print(f"  {k:>2} {summary['subsets']:>8} {summary['median']:>7.2f} {summary['mean']:>6.2f} "
                  f"{summary['min']:>6.2f} {summary['max']:>6.2f}")  # fmt: skip
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
