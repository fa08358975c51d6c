"""How long spot runs last in trace sets, and whether the last runs predict the next.

The policy's outlook prices a job's remaining reclaims from the spot runs it
has watched (``policies/slack.py``, ``forecast.SpotSupply``). Two facts about
those runs decide how it should read them, and this bench measures both on
any trace set, so a claim about them can be checked on a set the policy was
not built on:

- **Runs cluster.** After a few short runs, is the next one short too? Per
  set: the correlation of the logs of consecutive up runs, and the mean usable
  length ``E[max(0, L − d)]`` of a run (``d`` the restart: what a job that
  enters it gets out of it) over the runs with ``--after`` runs before them
  in their zone, and over those of them whose last ``--after`` runs were all
  shorter than ``--short-hours``.
- **A job meets runs length-biased.** A job that moves to a zone that is up
  enters its run at a random point, so it meets long runs more often than
  their count says: its expected stay is ``E[L²] / 2E[L]``, not ``E[L]``.
  Per zone: the fresh-run rate ``1/E[L]`` and the length-biased rate
  ``2E[L]/E[L²]``.

Given several zones (over all the sets named), it also prints how far the
pools' reclaim rates spread, and the strength that spread gives a Gamma
prior on a pool's hazard by the method of moments: with the zones' rates
``r`` (``1/E[L]``), their mean ``μ``, variance ``σ²`` and the Poisson noise of
each estimate (``r / hours``, averaged), ``S = μ / (σ² − noise)`` hours of a
pool's own record weigh as much as the prior (``policies/forecast.py``,
``PRIOR_STRENGTH_HOURS``: docs/simulator.md, "Where the slack goes").

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
from spotfleet.sim.traces import read_trace_file, trace_paths, up_runs


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

    def to_json(self) -> dict[str, float | int]:
        return {"runs": len(self.runs), "fresh_rate_per_h": round(self.fresh_rate, 3),
                "met_rate_per_h": round(self.met_rate, 3)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class SetFigures:
    """The per-set figures of the module docstring. The usable-run mean and its
    conditional one are taken over the same runs: those with ``after`` runs
    before them in their zone (the first ``after`` of each zone have no past
    to condition on)."""

    runs: int
    log_corr_consecutive: float
    usable_run_h: float | None
    usable_run_after_short_h: float | None
    after_short_count: int
    zones: list[ZoneRuns]

    def to_json(self) -> dict[str, object]:
        return {
            "runs": self.runs,
            "log_corr_consecutive": round(self.log_corr_consecutive, 3),
            "usable_run_h": _round(self.usable_run_h),
            "usable_run_after_short_h": _round(self.usable_run_after_short_h),
            "after_short_count": self.after_short_count,
            "zones": {z.zone: z.to_json() for z in self.zones},
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def set_figures(zones: list[ZoneRuns], *, restart_h: float, short_h: float, after: int) -> SetFigures:
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
    return SetFigures(
        runs=sum(len(z.runs) for z in zones),
        log_corr_consecutive=corr,
        usable_run_h=statistics.mean(usable_all) if usable_all else None,
        usable_run_after_short_h=statistics.mean(usable_after) if usable_after else None,
        after_short_count=len(usable_after),
        zones=zones,
    )


def pooled_spread(zones: list[ZoneRuns]) -> dict[str, float | int | None]:
    """The reclaim rates' spread over ``zones`` and the Gamma prior strength it
    implies (module docstring); ``prior_strength_h`` None where the rates spread
    no more than their noise (nothing tells the pools apart)."""
    seen = [z for z in zones if z.runs]
    rates = [z.fresh_rate for z in seen]
    mean = statistics.fmean(rates)
    var = statistics.pvariance(rates)
    noise = statistics.fmean(z.fresh_rate / sum(z.runs) for z in seen)
    strength = mean / (var - noise) if var > noise else None
    return {"zones": len(seen), "rate_mean_per_h": round(mean, 4), "rate_variance": round(var, 4),
            "noise_variance": round(noise, 4), "prior_strength_h": None if strength is None else round(strength, 2)}  # fmt: skip


def _show(hours: float | None) -> str:
    return "-" if hours is None else f"{hours:.3f} h"


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
    every: list[ZoneRuns] = []
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
        every += zones
        fig = set_figures(zones, restart_h=args.restart_hours, short_h=args.short_hours, after=args.after)
        print(f"{Path(item).name}: {fig.runs} runs, log-correlation of consecutive runs "
              f"{fig.log_corr_consecutive:.3f}; usable run (E[max(0, L - {args.restart_hours:g} h)]) "
              f"{_show(fig.usable_run_h)}, after {args.after} runs < {args.short_hours:g} h "
              f"{_show(fig.usable_run_after_short_h)} (n={fig.after_short_count})")  # fmt: skip
        for z in fig.zones:
            print(f"  {z.zone:<20} {len(z.runs):>4} runs  fresh 1/E[L] {z.fresh_rate:.2f}/h  "
                  f"met 2E[L]/E[L²] {z.met_rate:.2f}/h")  # fmt: skip
        print(json.dumps({"traces": item, "restart_hours": args.restart_hours, "short_hours": args.short_hours,
                          "after": args.after, **fig.to_json()}))  # fmt: skip
    if sum(1 for z in every if z.runs) >= 2:
        spread = pooled_spread(every)
        strength = spread["prior_strength_h"]
        print(f"pooled over {spread['zones']} zones: reclaim rate {spread['rate_mean_per_h']:.3f}/h on average, "
              f"variance {spread['rate_variance']:.4f} (noise {spread['noise_variance']:.4f}): a Gamma prior with "
              + (f"that spread weighs as much as {strength:.1f} h of a pool's own record" if strength is not None
                 else "no spread beyond the noise would outweigh any record"))  # fmt: skip
        print(json.dumps({"pooled": [str(t) for t in args.traces], **spread}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
