"""How much slack a job that stays on spot would spend, start by start, on real traces.

The slack outlook (``policies/slack.py``) predicts the slack a spot-only path
still spends from the learned hazard; a cold controller starts from the
cloud's prior. This bench measures the thing predicted, so the prior can be
checked on a set it was not computed from: for every K-zone subset and start
of ``bench/policy_cost.py --subsets`` (same subsets, same starts), a naive
spot-only path runs the job's work and counts the hours it does not progress:

- it takes the first zone that is up (trace order) and pays ``--restart-hours``;
- when that zone goes down it is reclaimed and moves to any zone up, paying
  another restart, or waits while none is;
- it never takes on-demand, so it may run past the deadline: what it spent is
  what the outlook's ``need`` stands for.

Per set it prints the mean, median and spread of the slack spent, the share of
starts that spend more than ``--slack-hours`` (the deadline's slack less a
spot start's reserve, by default 52 − 48 − 0.5 h: about V100's `start` of
0.51 h; GCP's is 0.6 h), the mean number of starts and the reclaim rate the
path met per hour on spot (pooled: reclaims over hours held), which is what
the hazard prior stands for: a job moving between zones enters runs part-way
through and meets fewer reclaims than one over the zones' mean run. Then one
JSON line. No policy runs: seconds per set.

    python -m bench.slack_need --traces ../shared/data/traces/aws-v100-2023-02 --subsets 3 --starts 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass

import numpy as np

from bench.policy_cost import subset_list
from spotfleet.sim.scenario import start_ticks
from spotfleet.sim.traces import TraceSet, load_traces


@dataclass(frozen=True, slots=True)
class SpotPath:
    """What the spot-only path from one start met."""

    spent_h: float  # hours without progress: restarts and waits
    starts: int  # spot starts paid (the first, then one per reclaim)
    spot_h: float  # hours held on spot (restarts included)

    @property
    def reclaims(self) -> int:
        return max(0, self.starts - 1)


def spot_only_need(available: np.ndarray, start: int, *, work_h: float, restart_h: float, tick_h: float) -> SpotPath:
    """The spot-only path from tick ``start`` until ``work_h`` is done or the
    trace ends; ``available``: zones × ticks, True where up. A start after the
    first follows a reclaim (the path never leaves spot on its own)."""
    done = spent = held = 0.0
    zone: int | None = None
    restart_left = 0.0
    starts = 0
    for t in range(start, available.shape[1]):
        if done >= work_h:
            break
        if zone is not None and not available[zone, t]:
            zone = None  # reclaimed
        if zone is None:
            up = np.flatnonzero(available[:, t])
            if len(up):
                zone, restart_left, starts = int(up[0]), restart_h, starts + 1
        if zone is None:
            spent += tick_h  # no zone up: wait
            continue
        paid = min(restart_left, tick_h)
        restart_left -= paid
        spent += paid
        held += tick_h
        done += tick_h - paid
    return SpotPath(spent, starts, held)


def measure(traces: TraceSet, zones: list[tuple[str, ...]], args: argparse.Namespace) -> list[SpotPath]:
    out: list[SpotPath] = []
    for subset in zones:
        market = traces.only(zones=subset)
        available = np.stack([z.available > 0 for z in market.zones])
        tick_h = market.tick_seconds / 3600.0
        for tick in start_ticks(market, count=args.starts, window_hours=args.deadline_hours):
            out.append(spot_only_need(available, tick, work_h=args.work_hours, restart_h=args.restart_hours,
                                      tick_h=tick_h))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", nargs="+", required=True, help="trace directories or files (one multi-zone set)")
    p.add_argument("--subsets", type=int, default=0, help="every K-zone subset is a market (0: all zones, one market)")
    p.add_argument("--max-subsets", type=int, default=0, help="an evenly spaced sample of at most this many subsets")
    p.add_argument("--starts", type=int, default=10)
    p.add_argument("--work-hours", type=float, default=48.0)
    p.add_argument("--deadline-hours", type=float, default=52.0)
    p.add_argument("--restart-hours", type=float, default=0.2)
    p.add_argument("--slack-hours", type=float, default=None,
                   help="slack a job may spend (default: deadline − work − 0.5 h, about a spot start's reserve; GCP's is 0.6 h)")  # fmt: skip
    args = p.parse_args(argv)
    if args.starts < 1:
        p.error(f"--starts {args.starts}: give at least 1")
    if args.deadline_hours <= args.work_hours:
        p.error(f"--deadline-hours {args.deadline_hours:g} must exceed --work-hours {args.work_hours:g}")
    slack = args.slack_hours if args.slack_hours is not None else args.deadline_hours - args.work_hours - 0.5
    traces = load_traces(args.traces, align="time")
    names = sorted({z.zone for z in traces.zones})
    zones = subset_list(names, args.subsets, args.max_subsets) if args.subsets else [tuple(names)]
    runs = measure(traces, zones, args)
    spent = [r.spent_h for r in runs]
    held = sum(r.spot_h for r in runs)
    line = {
        "traces": args.traces,
        "subsets": len(zones),
        "runs": len(runs),
        "mean_spent_h": round(statistics.fmean(spent), 3),
        "median_spent_h": round(statistics.median(spent), 3),
        "sd_spent_h": round(statistics.pstdev(spent), 3),
        "slack_h": slack,
        "share_over_slack": round(sum(s > slack for s in spent) / len(spent), 3),
        "mean_starts": round(statistics.fmean(r.starts for r in runs), 2),
        # the reclaim rate the path met, pooled: what the hazard prior (forecast.HAZARD_PRIOR_PER_HOUR) stands for
        "reclaims_per_spot_h": round(sum(r.reclaims for r in runs) / held, 3) if held > 0 else None,
    }
    print(f"{len(runs)} starts over {len(zones)} subsets: a spot-only path spends {line['mean_spent_h']:.2f} h of slack "
          f"on average (median {line['median_spent_h']:.2f}, sd {line['sd_spent_h']:.2f}) in "
          f"{line['mean_starts']:.1f} starts; {line['share_over_slack']:.0%} spend more than {slack:.2f} h")  # fmt: skip
    if line["reclaims_per_spot_h"] is not None:
        print(f"reclaims met per hour on spot: {line['reclaims_per_spot_h']:.3f} (pooled over {held:.0f} h)")
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
