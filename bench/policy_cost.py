"""Policy cost against the omniscient optimum on real spot traces (scenario a).

One job of ``--work-hours`` of work on one instance of the traces' type, due
``--deadline-hours`` after its start, run from ``--starts`` evenly spaced start
ticks under every policy; each run is the real controller step driving the
policy against the simulated cloud (spotfleet.sim). ``optimal`` is the
omniscient dynamic program on the same trace window. Several directories or
zones form one multi-zone set (multi-zone policies use all of them; the
single-region baseline picks one zone per run).

    python bench/policy_cost.py --traces ../shared/data/traces/gcp-h100-2025-10
    python bench/policy_cost.py --traces ../shared/data/traces/aws-v100-2023-02 --processes 2

Prints a table, then one JSON line per policy with ``policy``, ``runs``,
``mean_cost``, ``optimal_mean_cost``, ``ratio_to_optimal`` (mean cost over the
optimum's mean cost) and ``deadline_misses``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from spotfleet.sim.scenario import POLICY_NAMES, run_single_job, start_ticks
from spotfleet.sim.traces import TraceSet, load_traces


@dataclass(frozen=True)
class Run:
    policy: str
    start_tick: int
    cost: float
    missed: bool
    spot_share: float
    interruptions: int
    seconds: float


_TRACES: TraceSet | None = None


def _init(paths: list[str], align: str) -> None:
    global _TRACES
    _TRACES = load_traces(paths, align=align)  # type: ignore[arg-type]


def _one(args: tuple[str, int, float, float, float, float]) -> Run:
    policy, tick, work, deadline, restart, checkpoint_minutes = args
    assert _TRACES is not None
    began = time.perf_counter()
    interval = timedelta(minutes=checkpoint_minutes) if checkpoint_minutes > 0 else None
    run = run_single_job(
        _TRACES, policy, work_hours=work, deadline_hours=deadline, start_tick=tick, restart_hours=restart,
        checkpoint_interval=interval,
    )  # fmt: skip
    sim = run.sim
    return Run(
        policy=policy,
        start_tick=tick,
        cost=run.cost,
        missed=run.missed,
        spot_share=sim.spot_share if sim else float("nan"),
        interruptions=sim.interruptions if sim else 0,
        seconds=time.perf_counter() - began,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", nargs="+", required=True, help="trace directories or files (one multi-zone set)")
    parser.add_argument("--work-hours", type=float, default=48.0)
    parser.add_argument("--deadline-hours", type=float, default=52.0)
    parser.add_argument("--restart-hours", type=float, default=0.2)
    parser.add_argument("--checkpoint-minutes", type=float, default=30.0,
                        help="the job's periodic checkpoint interval (0: none; it still checkpoints on a notice)")  # fmt: skip
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0, help="0: starts from tick 0; else a seeded shift of the grid")
    parser.add_argument("--policies", nargs="+", default=list(POLICY_NAMES), choices=POLICY_NAMES)
    parser.add_argument("--processes", type=int, default=1, help="worker processes (this machine: 2 cores, shared)")
    parser.add_argument("--align", choices=["time", "start"], default="time")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    _init(args.traces, args.align)
    assert _TRACES is not None
    ticks = start_ticks(_TRACES, count=args.starts, window_hours=args.deadline_hours, seed=args.seed)
    policies = list(dict.fromkeys(["optimal", *args.policies]))
    tasks = [
        (p, t, args.work_hours, args.deadline_hours, args.restart_hours, args.checkpoint_minutes)
        for p in policies
        for t in ticks
    ]
    if args.processes > 1:
        with ProcessPoolExecutor(args.processes, initializer=_init, initargs=(args.traces, args.align)) as pool:
            runs = list(pool.map(_one, tasks, chunksize=1))
    else:
        runs = [_one(task) for task in tasks]

    optimum = {r.start_tick: r.cost for r in runs if r.policy == "optimal"}
    optimal_mean = statistics.fmean(optimum.values())
    zones = ", ".join(z.zone for z in _TRACES.zones)
    print(f"traces: {', '.join(args.traces)} ({len(_TRACES.zones)} zones: {zones}; "
          f"{_TRACES.n_ticks} ticks of {_TRACES.tick_seconds:g} s)")  # fmt: skip
    print(f"job: {args.work_hours:g} h of work, deadline {args.deadline_hours:g} h, restart {args.restart_hours:g} h, "
          f"checkpoint every {args.checkpoint_minutes:g} min, {len(ticks)} starts (seed {args.seed})\n")  # fmt: skip
    header = f"{'policy':<18}{'runs':>5}{'mean $':>11}{'optimal $':>11}{'ratio':>8}{'worst':>8}{'misses':>8}{'spot':>7}{'intr':>6}{'s/run':>7}"
    print(header)
    print("-" * len(header))
    lines = []
    for policy in policies:
        mine = [r for r in runs if r.policy == policy]
        mean = statistics.fmean(r.cost for r in mine)
        worst = max(r.cost / optimum[r.start_tick] for r in mine if optimum[r.start_tick] > 0)
        misses = sum(r.missed for r in mine)
        spot = statistics.fmean(r.spot_share for r in mine) if policy != "optimal" else float("nan")
        intr = statistics.fmean(r.interruptions for r in mine)
        per_run = statistics.fmean(r.seconds for r in mine)
        print(f"{policy:<18}{len(mine):>5}{mean:>11.2f}{optimal_mean:>11.2f}{mean / optimal_mean:>8.3f}"
              f"{worst:>8.3f}{misses:>8}{spot:>7.2f}{intr:>6.1f}{per_run:>7.2f}")  # fmt: skip
        lines.append({
            "policy": policy, "runs": len(mine), "mean_cost": round(mean, 4),
            "optimal_mean_cost": round(optimal_mean, 4), "ratio_to_optimal": round(mean / optimal_mean, 4),
            "deadline_misses": misses, "worst_ratio": round(worst, 4), "traces": args.traces,
            "work_hours": args.work_hours, "deadline_hours": args.deadline_hours,
            "restart_hours": args.restart_hours, "checkpoint_minutes": args.checkpoint_minutes,
            "starts": len(ticks), "seed": args.seed,
        })  # fmt: skip
    print(f"\n{len(runs)} runs in {time.perf_counter() - began:.1f} s")
    for line in lines:
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
