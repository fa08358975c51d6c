"""Behavioural probes: the policies on made-up spot markets whose right answer is known.

The real trace sets (``../shared/data/traces``) say how a policy does on the
markets we have; they cannot say how it does on a kind of market none of them
shows. Each probe here is a small, deterministic market built to ask one
question (is spot taken when it is always there? does a job move when a
cheaper zone comes back?), with the omniscient optimum as the yardstick. They
are probes, not a benchmark to tune to: nothing in the policy is fitted to
them, and a policy that passes them can still lose on real markets.

    python bench/synthetic_markets.py                      # every probe, 4 starts, greedy and spotfleet
    python bench/synthetic_markets.py --markets cheaper-zone-returns --starts 8 --keep /tmp/probes

Every market is 2 AWS-like zones (3 in dear-zone-bridges; p3.2xlarge, on-demand $3.06/h) over 500 h
of 10-minute ticks; the job is scenario (a) of ``bench/policy_cost.py`` (48 h
of work due in 52 h, 0.2 h restart). The controller is stepped at every tick
by default, as the live controller steps every interval: several probes are
quiet for hours (no trace changes), which is where ``--skip-quiet`` (the
trace benches' default) stops asking the policy (docs/simulator.md,
"Skipping quiet ticks").

Prints one row per market and policy (mean and worst ratio to the optimum,
misses, spot share, what the optimum does there), then one JSON line each.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from spotfleet.sim.engine import SimSettings
from spotfleet.sim.scenario import POLICY_NAMES, run_single_job, start_ticks
from spotfleet.sim.traces import TraceFile, TraceSet, load_traces

TICKS = 3000
TICK_S = 600.0
ON_DEMAND = 3.06
HOUR = int(3600 / TICK_S)


def _markov(rng: random.Random, up_h: float, down_h: float) -> list[int]:
    """Availability with exponential up and down runs of the given means."""
    out, state = [], 1
    for _ in range(TICKS):
        out.append(state)
        if rng.random() < (TICK_S / 3600) / (up_h if state else down_h):
            state = 1 - state
    return out


def _every(up_h: int, down_h: int, shift_h: int = 0) -> list[int]:
    """Up ``up_h`` hours then down ``down_h``, repeating, shifted by ``shift_h``."""
    period = (up_h + down_h) * HOUR
    return [1 if (i + shift_h * HOUR) % period < up_h * HOUR else 0 for i in range(TICKS)]


def _wave(phase: float) -> list[float]:
    """A spot price swinging from $0.40 to $1.60 and back every 48 h."""
    return [round(1.0 + 0.6 * math.sin(2 * math.pi * i / (48 * HOUR) + phase), 3) for i in range(TICKS)]


Zone = tuple[str, list[int], float | list[float]]  # zone, availability, spot price


@dataclass(frozen=True)
class Probe:
    name: str
    question: str
    optimum: str  # what the omniscient optimum does: the right answer in words
    zones: Callable[[random.Random], list[Zone]]


PROBES: tuple[Probe, ...] = (
    Probe(
        "always-up",
        "spot never goes away: is it taken, in the cheaper zone?",
        "rides the $0.92 zone throughout",
        lambda rng: [("us-east-1a", [1] * TICKS, 0.92), ("us-east-1b", [1] * TICKS, 1.10)],
    ),
    Probe(
        "never-up",
        "no spot at all: does the job go to on-demand at once?",
        "on-demand from the start",
        lambda rng: [("us-east-1a", [0] * TICKS, 0.92), ("us-east-1b", [0] * TICKS, 0.92)],
    ),
    Probe(
        "thin-discount",
        "spot always up at 96-98 % of on-demand: is a reclaim risk worth 2-4 %?",
        "spot throughout (it is never reclaimed); on-demand costs at most 4 % more",
        lambda rng: [("us-east-1a", [1] * TICKS, 2.95), ("us-east-1b", [1] * TICKS, 3.00)],
    ),
    Probe(
        "cheaper-zone-returns",
        "a zone at 29 % of on-demand is down for 5 h of every 60 h while one at 65 % "
        "stays up: does a job that started in the dear zone move when the cheap one is back?",
        "moves to the cheap zone once it is back",
        lambda rng: [("us-east-1a", [1] * TICKS, 2.00), ("us-east-1b", _every(55, 5, 55), 0.90)],
    ),
    Probe(
        "price-waves",
        "both zones always up, their prices swinging in opposite phase over 48 h: "
        "does the job follow the cheaper price?",
        "moves each time the prices cross",
        lambda rng: [("us-east-1a", [1] * TICKS, _wave(0.0)), ("us-east-1b", [1] * TICKS, _wave(math.pi))],
    ),
    Probe(
        "regular-outages",
        "each zone up 6 h, down 2 h, offset by 4 h: every outage of one is covered by the other",
        "moves between the zones at every outage, never on on-demand",
        lambda rng: [("us-east-1a", _every(6, 2), 0.92), ("us-east-1b", _every(6, 2, 4), 1.20)],
    ),
    Probe(
        "dear-zone-bridges",
        "two zones at 30 % of on-demand, each up 4 h and down 1.5 h on average (random), and one at 70 % "
        "always up: does a job with slack wait out the cheap zones' outages instead of bridging them "
        "in the dear zone?",
        "waits out most outages of the cheap zones; the dear zone only where the slack would run short",
        lambda rng: [
            ("us-east-1a", _markov(rng, 4, 1.5), 0.92),
            ("us-east-1b", _markov(rng, 4, 1.5), 0.95),
            ("us-west-2a", [1] * TICKS, 2.14),
        ],
    ),
    Probe(
        "flapping",
        "random runs: 3 h up / 1 h down at $0.92, 0.5 h / 0.5 h at $0.70 (the cheaper zone flaps)",
        "knows every run: no online policy can match it; for reference",
        lambda rng: [("us-east-1a", _markov(rng, 3, 1), 0.92), ("us-west-2a", _markov(rng, 0.5, 0.5), 0.70)],
    ),
)
BY_NAME = {p.name: p for p in PROBES}


def write_market(probe: Probe, folder: Path, *, seed: int = 0) -> Path:
    """Write ``probe``'s zones as trace files (the reference data schema) under ``folder/probe.name``."""
    out = folder / probe.name
    out.mkdir(parents=True, exist_ok=True)
    for zone, available, spot in probe.zones(random.Random(seed)):
        trace = TraceFile(
            name=f"synthetic-p3.2xlarge-{zone}", source=f"bench/synthetic_markets.py {probe.name} (seed {seed})",
            kind="availability", cloud="aws", region=zone[:-1], zone=zone, instance_type="p3.2xlarge",
            gpu="V100", gpus_per_instance=1, start_time=None, tick_seconds=TICK_S, on_demand_price=ON_DEMAND,
            spot_price=spot, requested=1, available=available,
        )  # fmt: skip
        (out / f"{zone}.json").write_text(trace.model_dump_json())
    return out


@dataclass(frozen=True)
class Result:
    market: str
    policy: str
    start_tick: int
    cost: float
    missed: bool
    spot_share: float


@functools.cache
def _market(folder: str) -> TraceSet:
    """A market's traces, loaded once per process (every policy and start reads them)."""
    return load_traces([folder])


def _run(task: tuple[str, str, int, bool]) -> Result:
    folder, policy, tick, every = task
    run = run_single_job(_market(folder), policy, work_hours=48.0, deadline_hours=52.0, start_tick=tick,
                         settings=SimSettings(skip_quiet=not every))  # fmt: skip
    share = run.sim.spot_share if run.sim is not None else float("nan")
    return Result(Path(folder).name, policy, tick, run.cost, run.missed, share)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markets", nargs="+", default=[p.name for p in PROBES], choices=list(BY_NAME),
                        metavar="NAME", help=f"which probes (default: all): {', '.join(BY_NAME)}")  # fmt: skip
    parser.add_argument("--policies", nargs="+", default=["greedy", "spotfleet"],
                        choices=[p for p in POLICY_NAMES if p != "optimal"])  # fmt: skip
    parser.add_argument("--starts", type=int, default=4, help="evenly spaced starts per market (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random markets (flapping)")
    parser.add_argument("--skip-quiet", action="store_true",
                        help="skip ticks where no trace changes while the job runs, as the trace benches do")  # fmt: skip
    parser.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--keep", type=Path, default=None, help="write the markets' trace files here and keep them")
    args = parser.parse_args(argv)
    if args.starts < 1:
        parser.error(f"--starts {args.starts}: give at least 1")
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spotfleet-probes-") as scratch:
        root = args.keep or Path(scratch)
        tasks: list[tuple[str, str, int, bool]] = []
        for name in args.markets:
            folder = write_market(BY_NAME[name], root, seed=args.seed)
            ticks = start_ticks(_market(str(folder)), count=args.starts, window_hours=52.0)
            tasks += [(str(folder), p, t, not args.skip_quiet) for p in ["optimal", *args.policies] for t in ticks]
        if args.processes > 1:
            with ProcessPoolExecutor(args.processes) as pool:
                results = list(pool.map(_run, tasks))
        else:
            results = [_run(t) for t in tasks]
    lines = summarize(results, args.markets, args.policies)
    header = f"{'market':<22}{'policy':<11}{'ratio':>7}{'worst':>7}{'misses':>7}{'spot':>6}  the optimum"
    print(header)
    print("-" * len(header))
    for line in lines:
        print(f"{line['market']:<22}{line['policy']:<11}{line['ratio_to_optimal']:>7.3f}{line['worst_ratio']:>7.3f}"
              f"{line['deadline_misses']:>7}{line['spot_share']:>6.2f}  {BY_NAME[str(line['market'])].optimum}")  # fmt: skip
    stepping = "quiet ticks skipped" if args.skip_quiet else "stepped every tick"
    print(f"\n{len(results)} runs in {time.perf_counter() - began:.1f} s ({stepping}; {args.starts} starts per market)")
    for line in lines:
        print(json.dumps({**line, "starts": args.starts, "seed": args.seed, "every_tick": not args.skip_quiet}))
    return 0


def summarize(results: list[Result], markets: list[str], policies: list[str]) -> list[dict[str, object]]:
    """Per market and policy: mean cost over the optimum's mean cost, the worst
    start's ratio, the misses and the mean spot share."""
    lines: list[dict[str, object]] = []
    for market in markets:
        optimum = {r.start_tick: r.cost for r in results if r.market == market and r.policy == "optimal"}
        for policy in policies:
            mine = [r for r in results if r.market == market and r.policy == policy]
            mean_opt = statistics.fmean(optimum[r.start_tick] for r in mine)
            lines.append({
                "market": market, "policy": policy,
                "ratio_to_optimal": round(statistics.fmean(r.cost for r in mine) / mean_opt, 4),
                "worst_ratio": round(max(r.cost / optimum[r.start_tick] for r in mine), 4),
                "deadline_misses": sum(r.missed for r in mine),
                "spot_share": round(statistics.fmean(r.spot_share for r in mine), 4),
            })  # fmt: skip
    return lines


if __name__ == "__main__":
    sys.exit(main())
