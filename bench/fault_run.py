#!/usr/bin/env python3
"""Fault run: a whole workload through the real ``Controller.step()`` while a
share of every provider call fails (capacity, quota, throttling, 5xx, timeouts,
and answers lost after the cloud acted), with simulated agents and reclaims.

It prints the counts — jobs completed, provider calls and injected faults by
kind, instances built, duplicate launches (instances beyond one per request
id), leaked instances (running at the cloud, unknown to the store or left
after the fleet went idle), invariant violations — then one JSON line.
Exit status 1 if any job did not complete or anything leaked or duplicated.

    python bench/fault_run.py [--jobs 40] [--rate 0.2] [--seed 7] [--dt 15] [--reclaims 4]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spotfleet.model import InstanceState
from tests.controller.workload import JobPlan, fresh_store, make_fleet, run_until_done


def workload(n: int, rng: random.Random, work: tuple[int, ...] = (60, 300, 900, 1800)) -> list[JobPlan]:
    plans = []
    for _i in range(n):
        plans.append(JobPlan(
            priority=rng.choice(["normal", "normal", "opportunistic", "critical"]),
            gpus=rng.choice([1, 1, 1, 4]), nodes=rng.choice([1, 1, 1, 2]), tenant=rng.choice(["a", "b"]),
            work_s=rng.choice(work),
            exit_codes=tuple(rng.choice([(), (), (), (3,), (-9,)])), submit_step=rng.randrange(0, 40),
        ))  # fmt: skip
    return plans


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--rate", type=float, default=0.2, help="share of provider calls that fail")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dt", type=float, default=15.0, help="seconds of virtual time per step")
    ap.add_argument("--reclaims", type=int, default=4, help="spot reclaims during the run")
    ap.add_argument("--max-steps", type=int, default=3000)
    args = ap.parse_args(argv)
    result = fault_run(jobs=args.jobs, rate=args.rate, seed=args.seed, dt=args.dt, reclaims=args.reclaims,
                       max_steps=args.max_steps)  # fmt: skip
    for key in (
        "jobs",
        "completed",
        "succeeded",
        "failed",
        "steps",
        "virtual_hours",
        "instances_built",
        "duplicate_launches",
        "leaked_instances",
        "violations",
        "max_launches_per_job",
        "wall_s",
    ):
        print(f"{key:>22}: {result[key]}")  # fmt: skip
    print(f"{'provider_calls':>22}: {result['provider_calls']}")
    print(f"{'faults_injected':>22}: {result['faults_injected']} ({result['fault_share']:.1%} of calls)")
    print(json.dumps(result, sort_keys=True))
    ok = result["completed"] == result["jobs"] and not result["duplicate_launches"] and not result["leaked_instances"]
    return 0 if ok and not result["violations"] else 1


def fault_run(*, jobs: int, rate: float, seed: int, dt: float = 15.0, reclaims: int = 4,
              max_steps: int = 3000, tmp: Path | None = None, work: tuple[int, ...] = (60, 300, 900, 1800),
              launch_faults: tuple[str, ...] = ("lost", "capacity", "timeout", "lost", "throttle", "5xx", "quota"),
              ) -> dict[str, object]:  # fmt: skip
    started = time.perf_counter()
    rng = random.Random(seed)
    tmp = tmp or Path(tempfile.mkdtemp(prefix="fault-run-"))
    fleet = make_fleet(fresh_store(tmp), tmp, rate=rate, seed=seed)
    fleet.provider.launch_faults = list(launch_faults)  # every kind at least once, lost answers first
    plans = sorted(workload(jobs, rng, work), key=lambda p: p.submit_step)
    reclaim_steps = set(rng.sample(range(5, 60), reclaims))
    queue = list(plans)

    def done() -> bool:
        return not queue and not fleet.unfinished() and not fleet.provider.running()

    steps = 0
    for n in run_until_done(fleet, dt=dt, max_steps=max_steps, until=done):
        steps = n + 1
        while queue and queue[0].submit_step <= n:
            fleet.submit(queue.pop(0))
        if n in reclaim_steps:
            fleet.reclaim_one(rng)
    states = Counter(fleet.store.get_job(j).state.value for j in fleet.jobs)
    calls = Counter(name for name, _ in fleet.provider.calls)
    injected = sum(fleet.provider.injected.values())
    observed = calls["launch"] + calls["terminate"] + calls["list_instances"]
    leaked = fleet.leaked() + [i.provider_id for i in fleet.provider.running()]
    stale = [i.id for i in fleet.store.list_instances(live_only=True) if i.state is not InstanceState.TERMINATED]
    per_job = fleet.launches_per_job()
    return {
        "jobs": jobs, "completed": states["succeeded"] + states["failed"], "succeeded": states["succeeded"],
        "failed": states["failed"], "steps": steps, "virtual_hours": round(steps * dt / 3600, 2),
        "instances_built": sum(fleet.provider.created.values()), "duplicate_launches": fleet.duplicates(),
        "leaked_instances": sorted(set(leaked)), "store_live_at_end": stale, "violations": fleet.violations[:10],
        "max_launches_per_job": max(per_job.values(), default=0), "provider_calls": dict(calls),
        "faults_injected": dict(fleet.provider.injected), "fault_share": injected / max(1, observed),
        "rate": rate, "seed": seed, "wall_s": round(time.perf_counter() - started, 1),
    }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
