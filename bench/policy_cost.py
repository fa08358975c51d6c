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

Leave-zones-out (``--subsets K``): every K-zone subset of the N zones given is
its own market (``--max-subsets`` keeps an evenly spaced sample of them, for a
smoke run); each subset gets ``--starts`` starts. Per policy it prints the mean
over subsets of the subset's ratio (its mean cost over the optimum's mean
cost), the worst subset's ratio, the worst single start, and the misses, then
one JSON line with ``mode: "subsets"``:

    python bench/policy_cost.py --traces ../shared/data/traces/aws-v100-2023-02 --subsets 3 --starts 30

Progress (runs done, elapsed, an estimate of the time left) goes to stderr.
``--runs-out PATH`` also writes every run as a JSON line (its subset, policy,
start tick, cost, the optimum's cost on the same start, misses), so that two
versions of a policy can be compared start by start with
``bench/compare_runs.py`` instead of by their means alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from spotfleet.sim.engine import SimSettings
from spotfleet.sim.scenario import POLICY_NAMES, run_single_job, start_ticks
from spotfleet.sim.traces import TraceSet, cloud_of, load_traces, spot_losses


@dataclass(frozen=True)
class Run:
    zones: tuple[str, ...]
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


_SUBSETS: dict[tuple[str, ...], TraceSet] = {}


def _subset(zones: tuple[str, ...]) -> TraceSet:
    assert _TRACES is not None
    if not zones:
        return _TRACES
    found = _SUBSETS.get(zones)
    if found is None:
        found = _SUBSETS[zones] = _TRACES.only(zones=zones)
    return found


Task = tuple[str, int, float, float, float, float, tuple[str, ...], float, float, float | None, float, bool]


def _one(args: Task) -> Run:
    policy, tick, work, deadline, restart, checkpoint_minutes, zones, checkpoint_gb, history, prior, saving_s, every = (
        args
    )
    traces = _subset(zones)
    began = time.perf_counter()
    interval = timedelta(minutes=checkpoint_minutes) if checkpoint_minutes > 0 else None
    run = run_single_job(
        traces, policy, work_hours=work, deadline_hours=deadline, start_tick=tick, restart_hours=restart,
        checkpoint_interval=interval, checkpoint_gb=checkpoint_gb, history_hours=history, hazard_prior_per_h=prior,
        settings=SimSettings(checkpoint_seconds=saving_s, skip_quiet=not every),
    )  # fmt: skip
    sim = run.sim
    return Run(
        zones=zones,
        policy=policy,
        start_tick=tick,
        cost=run.cost,
        missed=run.missed,
        spot_share=sim.spot_share if sim else float("nan"),
        interruptions=sim.interruptions if sim else 0,
        seconds=time.perf_counter() - began,
    )


PROGRESS_EVERY_S = 15.0
"""Seconds between two progress lines on stderr (and one when the last run ends)."""


def run_all(tasks: list[Task], args: argparse.Namespace, *, chunksize: int) -> list[Run]:
    """Every task's run, in task order: on ``--processes`` workers, with progress
    on stderr (a leave-zones-out protocol runs for most of an hour on two
    cores), and written to ``--runs-out`` when given."""
    began = last = time.monotonic()
    runs: list[Run] = []

    def done(run: Run) -> None:
        nonlocal last
        runs.append(run)
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S or len(runs) == len(tasks):
            last = now
            spent = now - began
            left = spent / len(runs) * (len(tasks) - len(runs))
            print(f"runs {len(runs)}/{len(tasks)}, {spent / 60:.1f} min, about {left / 60:.1f} min left",
                  file=sys.stderr, flush=True)  # fmt: skip

    if args.processes > 1:
        with ProcessPoolExecutor(args.processes, initializer=_init, initargs=(args.traces, args.align)) as pool:
            for run in pool.map(_one, tasks, chunksize=chunksize):
                done(run)
    else:
        for task in tasks:
            done(_one(task))
    if args.runs_out is not None:
        write_runs(args.runs_out, runs)
    return runs


def write_runs(path: Path, runs: list[Run]) -> None:
    """One JSON line per run, with the optimum's cost on the same subset and start
    (None when the optimum was not run) and the run's ratio to it."""
    optimum = {(r.zones, r.start_tick): r.cost for r in runs if r.policy == "optimal"}
    with path.open("w") as out:
        for r in runs:
            opt = optimum.get((r.zones, r.start_tick))
            out.write(json.dumps({
                "zones": "+".join(r.zones) or "all", "policy": r.policy, "start_tick": r.start_tick,
                "cost": round(r.cost, 6), "optimal_cost": None if opt is None else round(opt, 6),
                "ratio": round(r.cost / opt, 6) if opt else None, "missed": r.missed,
                "spot_share": None if math.isnan(r.spot_share) else round(r.spot_share, 4),
                "interruptions": r.interruptions,
            }) + "\n")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", nargs="+", required=True, help="trace directories or files (one multi-zone set)")
    parser.add_argument("--work-hours", type=float, default=48.0)
    parser.add_argument("--deadline-hours", type=float, default=52.0)
    parser.add_argument("--restart-hours", type=float, default=0.2)
    parser.add_argument("--checkpoint-minutes", type=float, default=30.0,
                        help="the job's periodic checkpoint interval (0: none; it still checkpoints on a notice)")  # fmt: skip
    parser.add_argument("--checkpoint-seconds", type=float, default=30.0,
                        help="how long the job takes to save a checkpoint once asked (its spec's checkpoint.duration); "
                             "longer than a cloud's notice (GCP 30 s, AWS 120 s), a reclaim there loses the work since "
                             "its last periodic checkpoint")  # fmt: skip
    parser.add_argument("--checkpoint-gb", type=float, default=0.0,
                        help="checkpoint size: resuming it in another region/cloud pays this many GiB of egress "
                             "(policy knobs' $/GiB), in the simulator and the optimum alike (0: moves are free)")  # fmt: skip
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0, help="0: starts from tick 0; else a seeded shift of the grid")
    parser.add_argument("--policies", nargs="+", default=list(POLICY_NAMES), choices=POLICY_NAMES)
    parser.add_argument("--processes", type=int, default=1, help="worker processes (this machine: 2 cores, shared)")
    parser.add_argument("--align", choices=["time", "start"], default="time")
    parser.add_argument("--history-hours", type=float, default=0.0,
                        help="hours of the traces before each start the controller has already watched "
                             "(its learned run lengths; 0: a controller started with the job)")  # fmt: skip
    parser.add_argument("--hazard-prior", type=_prior_arg, default=None,
                        help="spotfleet's hazard prior for every pool: interruptions per instance-hour, or "
                             "'held-out': the spot loss rate of the other trace sets beside --traces, of the "
                             "same cloud when there are any (default: its per-cloud priors; docs/simulator.md)")  # fmt: skip
    parser.add_argument("--subsets", type=int, default=0,
                        help="leave-zones-out: evaluate every K-zone subset of the zones given (0: off)")  # fmt: skip
    parser.add_argument("--max-subsets", type=int, default=0,
                        help="with --subsets: an evenly spaced sample of at most this many subsets (0: all)")  # fmt: skip
    parser.add_argument("--every-tick", action="store_true",
                        help="step the controller at every trace tick, as the live controller steps every interval "
                             "(default: skip ticks where no trace changes while every job runs; slower, "
                             "docs/simulator.md, \"Skipping quiet ticks\")")  # fmt: skip
    parser.add_argument("--runs-out", type=Path, default=None,
                        help="also write every run as a JSON line to this file (for bench/compare_runs.py)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.hazard_prior == HELD_OUT:
        try:
            args.hazard_prior, others = held_out_prior(args.traces)
        except ValueError as exc:
            parser.error(f"--hazard-prior held-out: {exc}")
        print(f"hazard prior (held out): {args.hazard_prior:.4f}/h, the spot loss rate of {', '.join(others)}")
    elif args.hazard_prior is not None and not 0 < args.hazard_prior <= 100:
        parser.error(f"--hazard-prior {args.hazard_prior:g}: give interruptions per instance-hour, above 0")
    if not 0 <= args.checkpoint_seconds <= 3600:
        parser.error(f"--checkpoint-seconds {args.checkpoint_seconds:g}: give seconds from 0 to 3600")
    if args.subsets:
        return _main_subsets(args)

    began = time.perf_counter()
    _init(args.traces, args.align)
    assert _TRACES is not None
    ticks = start_ticks(_TRACES, count=args.starts, window_hours=args.deadline_hours, seed=args.seed)
    policies = list(dict.fromkeys(["optimal", *args.policies]))
    tasks = [
        (
            p,
            t,
            args.work_hours,
            args.deadline_hours,
            args.restart_hours,
            args.checkpoint_minutes,
            (),
            args.checkpoint_gb,
            args.history_hours,
            args.hazard_prior,
            args.checkpoint_seconds,
            args.every_tick,
        )
        for p in policies
        for t in ticks
    ]
    runs = run_all(tasks, args, chunksize=1)
    optimum = {r.start_tick: r.cost for r in runs if r.policy == "optimal"}
    optimal_mean = statistics.fmean(optimum.values())
    zones = ", ".join(z.zone for z in _TRACES.zones)
    print(f"traces: {', '.join(args.traces)} ({len(_TRACES.zones)} zones: {zones}; "
          f"{_TRACES.n_ticks} ticks of {_TRACES.tick_seconds:g} s)")  # fmt: skip
    print(f"job: {args.work_hours:g} h of work, deadline {args.deadline_hours:g} h, restart {args.restart_hours:g} h, "
          f"checkpoint every {args.checkpoint_minutes:g} min of {args.checkpoint_gb:g} GB saved in {args.checkpoint_seconds:g} s, {len(ticks)} starts (seed {args.seed})\n")  # fmt: skip
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
            "checkpoint_gb": args.checkpoint_gb, "checkpoint_seconds": args.checkpoint_seconds,
            "starts": len(ticks), "seed": args.seed,
            "history_hours": args.history_hours, "hazard_prior": args.hazard_prior, "every_tick": args.every_tick,
        })  # fmt: skip
    print(f"\n{len(runs)} runs in {time.perf_counter() - began:.1f} s")
    for line in lines:
        print(json.dumps(line))
    return 0


HELD_OUT = "held-out"


def _prior_arg(value: str) -> float | str:
    if value == HELD_OUT:
        return value
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: give a rate per instance-hour or '{HELD_OUT}'") from None


def held_out_prior(traces: list[str]) -> tuple[float, list[str]]:
    """The hazard prior a set is judged with when no prior may come from it:
    the spot loss rate (``traces.spot_losses``) pooled over the other trace
    sets in the folders holding ``traces``, those of the same cloud when there
    are any, else all of them. Returns the rate and the sets it pooled."""
    given = {Path(t).resolve() for t in traces}
    if not all(p.is_dir() for p in given):
        raise ValueError("give trace directories (one set each), not files")
    siblings = sorted({s for p in given for s in p.parent.iterdir() if s.is_dir() and s not in given})
    siblings = [s for s in siblings if any(s.glob("*.json"))]
    if not siblings:
        raise ValueError("no other trace set beside the ones given")
    clouds = cloud_of(traces)
    same = [s for s in siblings if cloud_of([s]) & clouds]
    pool = same or siblings
    losses = spot_losses(pool)
    if losses.available_hours <= 0 or losses.losses == 0:
        raise ValueError(f"the other sets ({', '.join(s.name for s in pool)}) record no spot loss")
    return losses.rate, [s.name for s in pool]


def subset_list(zones: list[str], k: int, limit: int = 0) -> list[tuple[str, ...]]:
    """Every ``k``-zone subset of ``zones`` (lexicographic), or an evenly spaced
    sample of ``limit`` of them."""
    every = list(itertools.combinations(sorted(zones), k))
    if limit and limit < len(every):
        step = len(every) / limit
        every = [every[int(i * step)] for i in range(limit)]
    return every


def summarize_subsets(runs: list[Run], policies: list[str]) -> dict[str, dict[str, float | int | str]]:
    """Per policy: mean over subsets of (mean cost / optimum's mean cost), the
    worst subset's ratio and zones, the worst single start's ratio and the misses."""
    optimum = {(r.zones, r.start_tick): r.cost for r in runs if r.policy == "optimal"}
    subsets = sorted({r.zones for r in runs})
    out: dict[str, dict[str, float | int | str]] = {}
    for policy in policies:
        ratios: list[tuple[float, tuple[str, ...]]] = []
        worst_start = 0.0
        misses = 0
        n = 0
        for zones in subsets:
            mine = [r for r in runs if r.policy == policy and r.zones == zones]
            if not mine:
                continue
            n += len(mine)
            opt = statistics.fmean(optimum[(zones, r.start_tick)] for r in mine)
            ratios.append((statistics.fmean(r.cost for r in mine) / opt, zones))
            misses += sum(r.missed for r in mine)
            for r in mine:
                o = optimum[(zones, r.start_tick)]
                if o > 0:
                    worst_start = max(worst_start, r.cost / o)
        worst_ratio, worst_zones = max(ratios)
        out[policy] = {
            "subsets": len(ratios), "runs": n, "mean_ratio": round(statistics.fmean(r for r, _ in ratios), 4),
            "worst_subset_ratio": round(worst_ratio, 4), "worst_subset": "+".join(worst_zones) or "all",
            "worst_start_ratio": round(worst_start, 4), "deadline_misses": misses,
        }  # fmt: skip
    return out


def _main_subsets(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    _init(args.traces, args.align)
    assert _TRACES is not None
    names = sorted({z.zone for z in _TRACES.zones})
    if not 1 <= args.subsets <= len(names):
        print(f"--subsets {args.subsets}: the traces have {len(names)} zones", file=sys.stderr)
        return 2
    subsets = subset_list(names, args.subsets, args.max_subsets)
    policies = list(dict.fromkeys(["optimal", *args.policies]))
    tasks: list[Task] = []
    for zones in subsets:
        ticks = start_ticks(_subset(zones), count=args.starts, window_hours=args.deadline_hours, seed=args.seed)
        for p in policies:
            for t in ticks:
                tasks.append((p, t, args.work_hours, args.deadline_hours, args.restart_hours,
                              args.checkpoint_minutes, zones, args.checkpoint_gb, args.history_hours,
                              args.hazard_prior, args.checkpoint_seconds, args.every_tick))  # fmt: skip
    runs = run_all(tasks, args, chunksize=4)
    total = len(list(itertools.combinations(names, args.subsets)))
    print(f"traces: {', '.join(args.traces)} ({len(names)} zones); {len(subsets)} of {total} "
          f"{args.subsets}-zone subsets, {args.starts} starts each")  # fmt: skip
    print(f"job: {args.work_hours:g} h of work, deadline {args.deadline_hours:g} h, restart {args.restart_hours:g} h, "
          f"checkpoint every {args.checkpoint_minutes:g} min of {args.checkpoint_gb:g} GB saved in {args.checkpoint_seconds:g} s (seed {args.seed})\n")  # fmt: skip
    summary = summarize_subsets(runs, policies)
    header = (
        f"{'policy':<18}{'subsets':>8}{'runs':>6}{'mean ratio':>12}{'worst subset':>14}{'worst start':>13}{'misses':>8}"
        "  worst subset's zones"
    )
    print(header)
    print("-" * len(header))
    for policy in policies:
        s = summary[policy]
        print(f"{policy:<18}{s['subsets']:>8}{s['runs']:>6}{s['mean_ratio']:>12.3f}{s['worst_subset_ratio']:>14.3f}"
              f"{s['worst_start_ratio']:>13.3f}{s['deadline_misses']:>8}  {s['worst_subset']}")  # fmt: skip
    print(f"\n{len(runs)} runs in {time.perf_counter() - began:.1f} s")
    for policy in policies:
        print(json.dumps({
            "mode": "subsets", "policy": policy, **summary[policy], "k": args.subsets, "zones": len(names),
            "traces": args.traces, "work_hours": args.work_hours, "deadline_hours": args.deadline_hours,
            "restart_hours": args.restart_hours, "checkpoint_minutes": args.checkpoint_minutes,
            "checkpoint_gb": args.checkpoint_gb, "checkpoint_seconds": args.checkpoint_seconds,
            "starts": args.starts, "seed": args.seed,
            "history_hours": args.history_hours, "hazard_prior": args.hazard_prior,
            "max_subsets": args.max_subsets, "every_tick": args.every_tick,
        }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
