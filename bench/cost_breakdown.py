"""Where a policy's cost goes, start by start, against the omniscient optimum.

For every (zone subset, start) of a leave-zones-out run (same subsets and
starts as ``bench/policy_cost.py --subsets``), runs the policy and the optimum
(with its schedule) and decomposes both:

- spot / on-demand hours paid and their USD, overlap (two instances billed at once);
- on-demand hours bought while some zone of the set had spot (counted on the
  traces' ticks: the job had not gone back to spot yet), and the last stretch
  of on-demand a job ended on;
- restarts (each a paid, non-productive restart delay), reclaims (the job's
  interruption notices: ``Bill.reclaimed`` is rarely set, as the drained
  instance is given back within the notice);
- hours waited with nothing running;
- dollars billed after the job finished (``billed_after_finish_usd``: the
  last instance waiting out the idle TTL until the controller gives it back;
  the optimum pays none), read off the simulator's cost curve;
- when on-demand was first used, and the slack left then (estimated from the
  bills: progress = paid time minus one restart per instance);
- the slack left at the finish (deadline minus finish): slack a job ends with
  was never spent, so where it paid on-demand while holding it, the hours could
  have waited for spot instead. The summary splits the gap to the optimum by
  that slack in half-hour bands: starts that ended at the reserve ran out of
  slack (the rest of the job on on-demand), starts that ended with hours of it
  bought on-demand they did not need.

    python -m bench.cost_breakdown --traces ../shared/data/traces/aws-v100-2023-02 --subsets 3 --starts 10 \
        --only us-east-1c,us-east-1f,us-west-2b --json /tmp/breakdown.json

Writes one JSON object per start (``--json``) and prints per subset the mean
of each figure for the policy and the optimum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import timedelta
from typing import Any

import numpy as np

from bench.policy_cost import subset_list
from spotfleet.model.offering import Market
from spotfleet.sim.optimal import optimal_single_job
from spotfleet.sim.scenario import run_single_job, start_ticks
from spotfleet.sim.traces import TraceSet, load_traces


def policy_breakdown(
    traces: TraceSet,
    policy: str,
    tick: int,
    *,
    work: float,
    deadline: float,
    restart: float,
    ckpt_min: float,
    history_hours: float = 0.0,
) -> dict[str, Any]:
    run = run_single_job(
        traces, policy, work_hours=work, deadline_hours=deadline, start_tick=tick, restart_hours=restart,
        checkpoint_interval=timedelta(minutes=ckpt_min) if ckpt_min > 0 else None, history_hours=history_hours,
    )  # fmt: skip
    sim = run.sim
    assert sim is not None
    t0 = run.start
    end = run.finished_at or sim.end
    bills = sorted(sim.bills, key=lambda b: b.launched_at)

    def h(t: Any) -> float:
        return float((t - t0).total_seconds() / 3600.0)

    spans = [(h(b.launched_at), h(b.ended_at or sim.end), b) for b in bills]
    # covered time, overlap
    events = sorted([(a, 1) for a, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    covered = overlap = 0.0
    depth = 0
    last = 0.0
    for t, d in events:
        if depth >= 1:
            covered += t - last
        if depth >= 2:
            overlap += t - last
        depth += d
        last = t
    finish = h(end)
    waited = max(0.0, finish - covered)
    spot_h = sum(e - a for a, e, b in spans if b.market is Market.SPOT)
    od_h = sum(e - a for a, e, b in spans if b.market is Market.ON_DEMAND)
    # on-demand hours bought while some zone of the set had spot (the job had not gone back yet),
    # counted on the traces' ticks; and the job's last stretch when it ended on on-demand
    any_up = np.stack([z.available > 0 for z in traces.zones]).any(axis=0)
    od_spot_up = 0.0
    for a, e, b in spans:
        if b.market is Market.ON_DEMAND:
            first, last = traces.tick_at(t0 + timedelta(hours=a)), traces.tick_at(t0 + timedelta(hours=e))
            od_spot_up += float(any_up[max(0, first) : max(0, last)].sum()) * traces.tick_seconds / 3600.0
    last_od = spans[-1][1] - spans[-1][0] if spans and spans[-1][2].market is Market.ON_DEMAND else 0.0
    spot_usd = sum(b.cost for b in bills if b.market is Market.SPOT)
    od_usd = sum(b.cost for b in bills if b.market is Market.ON_DEMAND)
    # progress before each bill: paid minus a restart per instance (approximate)
    done = 0.0
    first_od = None
    slack_at_od = None
    segs = []
    for a, e, b in spans:
        if b.market is Market.ON_DEMAND and first_od is None:
            first_od = a
            slack_at_od = (deadline - a) - (work - done)
        segs.append(
            {"from": round(a, 3), "to": round(e, 3), "market": b.market.value, "zone": b.zone,
             "reclaimed": b.reclaimed, "slack_before": round((deadline - a) - (work - done), 3)}
        )  # fmt: skip
        done += max(0.0, (e - a) - restart)
    job = sim.jobs[0]
    # the cost curve has a point at every wake-up, the finish among them: what came after is the idle tail
    at_finish = max((usd for t, usd in sim.cost_curve if t <= end), default=0.0)
    return {
        "cost": run.cost,
        "missed": run.missed,
        "finish_h": finish,
        "spot_h": spot_h,
        "od_h": od_h,
        "spot_usd": spot_usd,
        "od_usd": od_usd,
        "overlap_h": overlap,
        "od_h_with_spot_up": od_spot_up,
        "od_h_last_stretch": last_od,
        "waited_h": waited,
        "billed_after_finish_usd": max(0.0, run.cost - at_finish),
        "instances": len(bills),
        "starts": job.starts,
        # a drained instance is usually given back before the cloud takes it: count the job's notices
        "reclaims": job.interruptions,
        "instances_reclaimed": sum(b.reclaimed for b in bills),
        "lost_h": job.lost_seconds / 3600.0,
        "first_od_h": first_od,
        "slack_at_first_od": slack_at_od,
        "slack_left_h": deadline - finish,
        "segments": segs,
    }


def optimal_breakdown(traces: TraceSet, tick: int, *, work: float, deadline: float, restart: float) -> dict[str, Any]:
    best = optimal_single_job(
        traces, work_hours=work, deadline_hours=deadline, start_tick=tick, restart_hours=restart, with_schedule=True
    )
    ts = traces.tick_seconds / 3600.0
    spot_h = od_h = spot_usd = od_usd = 0.0
    first_od = None
    slack_at_od = None
    done = 0.0
    segs = []
    restarts = 0
    for s in best.schedule:
        a = (s.start_tick - tick) * ts
        if s.market is None:
            continue
        restarts += 1
        if s.market is Market.SPOT:
            spot_h += s.seconds / 3600
            spot_usd += s.cost
        else:
            od_h += s.seconds / 3600
            od_usd += s.cost
            if first_od is None:
                first_od = a
                slack_at_od = (deadline - a) - (work - done)
        segs.append({"from": round(a, 3), "hours": round(s.seconds / 3600, 3), "market": s.market.value,
                     "zone": s.zone, "slack_before": round((deadline - a) - (work - done), 3)})  # fmt: skip
        done += max(0.0, s.seconds / 3600 - restart)
    return {
        "cost": best.cost,
        "finish_h": best.finish_seconds / 3600,
        "spot_h": spot_h,
        "od_h": od_h,
        "spot_usd": spot_usd,
        "od_usd": od_usd,
        "restarts": restarts,
        "waited_h": best.finish_seconds / 3600 - spot_h - od_h,
        "first_od_h": first_od,
        "slack_at_first_od": slack_at_od,
        "slack_left_h": deadline - best.finish_seconds / 3600,
        "segments": segs,
    }


def slack_left_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean slack left at the finish (policy, optimum) and the policy's extra
    dollars over the optimum per half-hour band of its slack left (band → USD)."""
    bands: dict[float, float] = {}
    for r in rows:
        band = max(0.0, r["policy"]["slack_left_h"]) // 0.5 * 0.5
        bands[band] = bands.get(band, 0.0) + r["policy"]["cost"] - r["optimal"]["cost"]
    return {
        "policy_mean_h": statistics.fmean(r["policy"]["slack_left_h"] for r in rows),
        "optimal_mean_h": statistics.fmean(r["optimal"]["slack_left_h"] for r in rows),
        "gap_usd_by_slack_left_h": {k: round(bands[k], 2) for k in sorted(bands)},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--traces", nargs="+", required=True)
    p.add_argument("--subsets", type=int, default=3)
    p.add_argument("--max-subsets", type=int, default=0)
    p.add_argument("--only", nargs="*", default=[], help="zone subsets as a,b,c (default: all)")
    p.add_argument("--starts", type=int, default=10)
    p.add_argument("--work-hours", type=float, default=48.0)
    p.add_argument("--deadline-hours", type=float, default=52.0)
    p.add_argument("--restart-hours", type=float, default=0.2)
    p.add_argument("--checkpoint-minutes", type=float, default=30.0)
    p.add_argument("--policy", default="spotfleet")
    p.add_argument("--history-hours", type=float, default=0.0,
                   help="hours of the traces before each start the controller has watched (policy_cost's flag)")  # fmt: skip
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    full = load_traces(args.traces, align="time")
    names = sorted({z.zone for z in full.zones})
    subsets = subset_list(names, args.subsets, args.max_subsets)
    if args.only:
        wanted = {tuple(sorted(s.split(","))) for s in args.only}
        subsets = [s for s in subsets if s in wanted]
        if not subsets:
            p.error(f"--only {' '.join(args.only)} names no subset of {args.subsets} of the zones "
                    f"{', '.join(names)}: give {args.subsets} of them, comma-separated (or set --subsets)")  # fmt: skip
    rows = []
    out = open(args.json, "w") if args.json else None
    for zones in subsets:
        traces = full.only(zones=zones)
        ticks = start_ticks(traces, count=args.starts, window_hours=args.deadline_hours)
        for tick in ticks:
            kw = {"work": args.work_hours, "deadline": args.deadline_hours, "restart": args.restart_hours}
            mine = policy_breakdown(traces, args.policy, tick, ckpt_min=args.checkpoint_minutes,
                                    history_hours=args.history_hours, **kw)  # fmt: skip
            opt = optimal_breakdown(traces, tick, **kw)
            row = {"zones": zones, "tick": tick, "policy": mine, "optimal": opt, "ratio": mine["cost"] / opt["cost"]}
            rows.append(row)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
            print(f"{','.join(zones)} t={tick:5d} ratio {row['ratio']:.3f}  "
                  f"pol ${mine['cost']:.1f} spot {mine['spot_h']:.1f}h od {mine['od_h']:.1f}h wait {mine['waited_h']:.1f}h "
                  f"ovl {mine['overlap_h']:.2f}h inst {mine['instances']} recl {mine['reclaims']} "
                  f"od@{_f(mine['first_od_h'])} slack {_f(mine['slack_at_first_od'])} | "
                  f"opt ${opt['cost']:.1f} spot {opt['spot_h']:.1f}h od {opt['od_h']:.1f}h wait {opt['waited_h']:.1f}h "
                  f"starts {opt['restarts']} od@{_f(opt['first_od_h'])} slack {_f(opt['slack_at_first_od'])}",
                  flush=True)  # fmt: skip
    for zones in subsets:
        mine = [r for r in rows if r["zones"] == zones]
        pc = statistics.fmean(r["policy"]["cost"] for r in mine)
        oc = statistics.fmean(r["optimal"]["cost"] for r in mine)
        print(f"{','.join(zones)}: ratio {pc / oc:.3f}")
    if rows:
        left = slack_left_summary(rows)
        bands = ", ".join(f"{k:.1f}-{k + 0.5:.1f} h ${v:,.0f}" for k, v in left["gap_usd_by_slack_left_h"].items())
        print(f"slack left at the finish: {left['policy_mean_h']:.2f} h ({args.policy}), "
              f"{left['optimal_mean_h']:.2f} h (optimum); extra USD by slack left: {bands}")  # fmt: skip
        tail = sum(r["policy"]["billed_after_finish_usd"] for r in rows)
        share = tail / sum(r["policy"]["cost"] for r in rows)
        print(f"billed after the job finished: ${tail:,.2f} ({share:.2%} of {args.policy}'s cost; the optimum: $0)")
        print(json.dumps({"policy": args.policy, "starts": len(rows), **left,
                          "billed_after_finish_usd": round(tail, 2), "billed_after_finish_share": round(share, 5)}))  # fmt: skip
    return 0


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    sys.exit(main())
