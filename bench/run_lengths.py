"""How long spot runs last in trace sets, and whether the last runs predict the next.

The policy's outlook prices a job's remaining reclaims from the spot runs it
has watched (``policies/slack.py``, ``forecast.SpotSupply``). Two facts about
those runs decide how it should read them, and this bench measures both on
any trace set, so a claim about them can be checked on a set the policy was
not built on:

- **Runs cluster.** After a few short runs, is the next one short too? Per
  set: the correlation of the logs of consecutive up runs, and the mean usable
  length ``E[max(0, L − d)]`` of a run (``d`` the restart: what a job that
  enters it gets out of it) over all runs, and after the last ``--after``
  runs were all shorter than ``--short-hours``.
- **A job meets runs length-biased.** A job that moves to a zone that is up
  enters its run at a random point, so it meets long runs more often than
  their count says: its expected stay is ``E[L²] / 2E[L]``, not ``E[L]``.
  Per zone: the fresh-run rate ``1/E[L]`` and the length-biased rate
  ``2E[L]/E[L²]``.

Only runs that ended inside the trace count (one still up at the end is cut
off); each file is read on its own ticks, available while at least one
instance can be had, as the simulator reads it.

    python bench/run_lengths.py ../shared/data/traces/aws-v100-2023-02 ../shared/data/traces/gcp-h100-2025-10

Prints a table per set and one JSON line per set.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from spotfleet.errors import InvalidSpec
from spotfleet.sim.traces import read_trace_file, trace_paths


def up_runs(available: list[int], tick_hours: float) -> list[float]:
    """Lengths (hours) of the up runs that ended inside the series, in order."""
    runs: list[float] = []
    length = 0
    for count in available:
        if count > 0:
            length += 1
        elif length:
            runs.append(length * tick_hours)
            length = 0
    return runs


@dataclass(frozen=True, slots=True)
class ZoneRuns:
    zone: str
    runs: list[float]

    @property
    def fresh_rate(self) -> float:
        """Reclaims per up hour for a job that enters every run at its start: 1/E[L]."""
        return len(self.runs) / sum(self.runs) if self.runs else math.nan

    @property
    def met_rate(self) -> float:
        """Reclaims per up hour for a job that enters runs at random points: 2E[L]/E[L²]."""
        return 2 * sum(self.runs) / sum(x * x for x in self.runs) if self.runs else math.nan


def set_figures(zones: list[ZoneRuns], *, restart_h: float, short_h: float, after: int) -> dict[str, object]:
    """The per-set figures of the module docstring."""
    pairs = [(a, b) for z in zones for a, b in zip(z.runs, z.runs[1:], strict=False)]
    logs = [(math.log(a), math.log(b)) for a, b in pairs]
    corr = statistics.correlation([a for a, _ in logs], [b for _, b in logs]) if len(logs) > 2 else math.nan
    usable_all: list[float] = []
    usable_after: list[float] = []
    for z in zones:
        for i in range(after, len(z.runs)):
            usable = max(0.0, z.runs[i] - restart_h)
            usable_all.append(usable)
            if all(x < short_h for x in z.runs[i - after : i]):
                usable_after.append(usable)
    return {
        "runs": sum(len(z.runs) for z in zones),
        "log_corr_consecutive": round(corr, 3),
        "usable_run_h": round(statistics.mean(usable_all), 3) if usable_all else None,
        "usable_run_after_short_h": round(statistics.mean(usable_after), 3) if usable_after else None,
        "after_short_count": len(usable_after),
        "zones": {z.zone: _zone_figures(z) for z in zones},
    }


def _zone_figures(z: ZoneRuns) -> dict[str, float | int]:
    return {"runs": len(z.runs), "fresh_rate_per_h": round(z.fresh_rate, 3), "met_rate_per_h": round(z.met_rate, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", help="trace set directories (each one set)")
    parser.add_argument("--restart-hours", type=float, default=0.2, help="what entering a run costs (h)")
    parser.add_argument("--short-hours", type=float, default=0.5, help="a run shorter than this is short (h)")
    parser.add_argument("--after", type=int, default=3, help="how many short runs in a row to condition on")
    args = parser.parse_args(argv)
    if args.after < 1 or args.short_hours <= 0 or args.restart_hours < 0:
        print("--after must be ≥ 1, --short-hours > 0 and --restart-hours ≥ 0", file=sys.stderr)
        return 2
    for item in args.traces:
        try:
            files = trace_paths([item])
        except InvalidSpec as exc:
            print(f"{item}: {exc}", file=sys.stderr)
            return 2
        zones = []
        for path in files:
            tf = read_trace_file(path)
            zones.append(ZoneRuns(tf.zone, up_runs(list(tf.available), tf.tick_seconds / 3600.0)))
        fig = set_figures(zones, restart_h=args.restart_hours, short_h=args.short_hours, after=args.after)
        print(f"{Path(item).name}: {fig['runs']} runs, log-correlation of consecutive runs "
              f"{fig['log_corr_consecutive']}; usable run (E[max(0, L - {args.restart_hours:g} h)]) "
              f"{fig['usable_run_h']} h, after {args.after} runs < {args.short_hours:g} h "
              f"{fig['usable_run_after_short_h']} h (n={fig['after_short_count']})")  # fmt: skip
        for zone, z in fig["zones"].items():  # type: ignore[attr-defined]
            print(f"  {zone:<20} {z['runs']:>4} runs  fresh 1/E[L] {z['fresh_rate_per_h']:.2f}/h  "
                  f"met 2E[L]/E[L²] {z['met_rate_per_h']:.2f}/h")  # fmt: skip
        print(json.dumps({"traces": item, "restart_hours": args.restart_hours, "short_hours": args.short_hours,
                          "after": args.after, **fig}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
