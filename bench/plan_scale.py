"""How long does planning take for a big backlog on a big fleet?

Builds a random but realistic snapshot — N pending jobs of mixed sizes and
classes (1–8 GPUs, MIG and fractional shares, 2–4 node gangs; critical,
normal, deadline and opportunistic; a few tenants with budgets), M live
instances drawn from the full bundled AWS+GCP catalog and partly filled with
running jobs, and that whole catalog as offerings — then times
``SpotfleetPolicy.decide`` (and the controller's ``plan()`` when it exists on
this branch). Prints a table and one JSON line.

    python bench/plan_scale.py                      # 1,000×200 and 10,000×2,000
    python bench/plan_scale.py --jobs 10000 --instances 2000 --profile
    python bench/plan_scale.py --located-share 1.0   # every pending job a requeue

``--located-share P``: that share of the pending jobs are requeues after a
mass reclaim — each resumes from a 50 GiB checkpoint written in some region,
with its own progress, so each prices moving it (resume egress) and gets its
own economics instead of its spec's shared one.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from spotfleet.catalog import load_catalog
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Binding, Checkpoint, Job, JobState
from spotfleet.model.offering import Offering, Offerings
from spotfleet.model.snapshot import Budget, Snapshot, sequential_ids
from spotfleet.model.spec import JobSpec, Resources
from spotfleet.policies.spotfleet import SpotfleetPolicy

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

# (weight, resources, extra spec fields)
TEMPLATES: list[tuple[float, dict[str, Any], dict[str, Any]]] = [
    (20, {"gpus": 1}, {}),
    (10, {"gpus": 1, "gpu_memory_gib": 20}, {}),
    (8, {"gpus": 1, "gpu_types": ["L4", "A10G"]}, {}),
    (8, {"gpus": 2, "gpu_memory_gib": 40}, {}),
    (8, {"gpus": 4, "gpu_types": ["A100", "A100-80GB", "H100"]}, {}),
    (6, {"gpus": 8, "gpu_types": ["H100", "H200"], "nvlink": True}, {}),
    (4, {"gpus": 8, "gpu_memory_gib": 40, "nvlink": True}, {}),
    (6, {"mig": "1g.10gb"}, {}),
    (4, {"mig": "3g.40gb"}, {}),
    (5, {"gpu_fraction": 0.25}, {}),
    (3, {"gpus": 8, "nodes": 2, "gpu_types": ["H100"], "nvlink": True}, {}),
    (2, {"gpus": 4, "nodes": 4}, {}),
    (6, {"gpus": 1, "gpu_types": ["T4", "L4"]}, {"regions": ["us-east-1", "us-central1"]}),
    (5, {"gpus": 2}, {"dataset": {"region": "us-east-1", "size_gib": 500}}),
]
PRIORITIES = [("normal", 50), ("opportunistic", 30), ("critical", 10), ("deadline", 10)]
DURATIONS = ["30m", "1h", "2h", "6h", "12h"]
INTERVALS = [None, "10m", "30m"]
TENANTS = ["research", "prod", "interns"]


def _weighted(rng: random.Random, items: Sequence[tuple[Any, float]]) -> Any:
    return rng.choices([i for i, _ in items], weights=[w for _, w in items])[0]


def make_specs(rng: random.Random, n: int) -> list[JobSpec]:
    bases: dict[tuple[int, str, str | None, str, str], JobSpec] = {}
    specs = []
    for k in range(n):
        t = rng.choices(range(len(TEMPLATES)), weights=[w for w, _, _ in TEMPLATES])[0]
        prio = _weighted(rng, PRIORITIES)
        duration = rng.choice(DURATIONS)
        interval = rng.choice(INTERVALS)
        tenant = rng.choice(TENANTS)
        key = (t, prio, interval, duration, tenant)
        base = bases.get(key)
        if base is None:
            _, res, extra = TEMPLATES[t]
            data: dict[str, Any] = {
                "name": f"fam-{t}",
                "command": "python train.py",
                "resources": res,
                "tenant": tenant,
                "priority": "normal" if prio == "deadline" else prio,
                "expected_duration": duration,
                "checkpoint": {"interval": interval} if interval else {},
                **extra,
            }
            base = bases[key] = JobSpec.model_validate(data)
        update: dict[str, Any] = {"name": f"job-{k}"}
        if prio == "deadline":
            update["deadline"] = NOW + timedelta(hours=rng.choice([3, 8, 24, 48]))
        specs.append(base.model_copy(update=update))
    return specs


def build_snapshot(
    n_jobs: int, n_instances: int, *, seed: int = 7, offerings: Offerings | None = None, located_share: float = 0.0
) -> Snapshot:
    rng = random.Random(seed)
    catalog = offerings if offerings is not None else load_catalog()
    regions = sorted({(o.provider, o.region) for o in catalog})
    located = random.Random(seed + 1)  # its own stream: the default snapshot stays what it was
    jobs: dict[str, Job] = {}
    for k, spec in enumerate(make_specs(rng, n_jobs)):
        created = NOW - timedelta(seconds=rng.randint(0, 7200))
        job = jobs[f"p{k}"] = Job(f"p{k}", spec, JobState.PENDING, created, created)
        if located_share and located.random() < located_share:
            _requeue_with_checkpoint(job, located, regions)
    # a fleet weighted toward the common training boxes
    pool: list[Offering] = list(catalog)
    weights = [8.0 if o.gpu in ("H100", "A100", "L4", "A10G", "T4") else 1.0 for o in pool]
    instances: dict[str, Instance] = {}
    running_specs = make_specs(rng, n_instances * 2)
    r_iter = iter(running_specs)
    for k in range(n_instances):
        o = rng.choices(pool, weights=weights)[0]
        state = InstanceState.RUNNING if rng.random() < 0.9 else InstanceState.PROVISIONING
        since = NOW - timedelta(minutes=rng.randint(1, 600))
        inst = Instance(f"i{k}", o, f"req-{k}", state, since, since)
        instances[inst.id] = inst
        # partly full: whole-GPU single-node jobs on a random share of the GPUs
        free = list(range(o.gpu_count))
        target = rng.randint(0, o.gpu_count)
        if target == 0 and state is InstanceState.RUNNING:
            inst.idle_since = NOW - timedelta(minutes=rng.randint(0, 30))
        j = 0
        while len(free) > o.gpu_count - target:
            spec = next(r_iter)
            r = spec.resources
            if r.mig or r.gpu_fraction or r.nodes > 1 or r.gpus > len(free) or r.gpus == 0:
                spec = spec.model_copy(update={"resources": Resources(gpus=1)})
                r = spec.resources
            gpus, free = free[: r.gpus], free[r.gpus :]
            started = NOW - timedelta(minutes=rng.randint(1, 300))
            jid = f"r{k}-{j}"
            job = Job(
                jid, spec, JobState.RUNNING, started, started, attempt=1, bindings=(Binding(0, inst.id, tuple(gpus)),)
            )
            if rng.random() < 0.7:
                job.checkpoint = Checkpoint("s3://ckpt/x", 100, NOW - timedelta(minutes=rng.randint(1, 60)), 1)
            jobs[jid] = job
            j += 1
    budgets = (Budget(max_per_hour=250_000.0), Budget(max_per_hour=60_000.0, tenant="interns"))
    return Snapshot(now=NOW, jobs=jobs, instances=instances, offerings=catalog, budgets=budgets)


def _requeue_with_checkpoint(job: Job, rng: random.Random, regions: list[tuple[str, str]]) -> None:
    """Make ``job`` a requeue after a reclaim: a 50 GiB checkpoint written in a
    random region (as the controller stamps it), some of its work done."""
    spec = job.spec
    job.spec = spec.model_copy(update={"checkpoint": spec.checkpoint.model_copy(update={"size_gib": 50.0})})
    provider, region = rng.choice(regions)
    job.attempt = 1
    job.checkpoint = Checkpoint("s3://ckpt/x", 100, NOW - timedelta(minutes=rng.randint(1, 60)), 1, provider, region)
    job.progress = {"fraction": round(rng.random(), 3)}


def _time(fn: Any, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds per call (the machine is shared: CPU time shows
    what the plan costs when wall time is inflated by neighbours)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall, cpu


def _controller_plan() -> Any:
    try:
        from spotfleet.controller import plan as plan_module
    except ImportError:
        return None
    return getattr(plan_module, "plan", None)


def _time_plan(
    n_jobs: int, n_inst: int, catalog: Offerings, repeat: int, located_share: float
) -> tuple[float, float] | None:
    """min wall and CPU seconds of the controller's full ``plan()`` (sync →
    decide → apply/validate); it mutates its snapshot, so each run gets a
    fresh one (built outside the timing)."""
    plan = _controller_plan()
    if plan is None:
        return None
    wall, cpu = [], []
    for _ in range(repeat):
        snap = build_snapshot(n_jobs, n_inst, offerings=catalog, located_share=located_share)
        snap.new_id = sequential_ids()
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan(snap, SpotfleetPolicy())
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if result.rejected:
            print(f"plan() rejected {len(result.rejected)} commands, e.g. {result.rejected[0].reason}", file=sys.stderr)
    return min(wall), min(cpu)


def run(
    sizes: list[tuple[int, int]], *, repeat: int, profile: bool, located_share: float = 0.0
) -> list[dict[str, Any]]:
    catalog = load_catalog()
    policy = SpotfleetPolicy()
    rows = []
    for n_jobs, n_inst in sizes:
        snap = build_snapshot(n_jobs, n_inst, offerings=catalog, located_share=located_share)
        snap.new_id = sequential_ids()
        located = sum(1 for j in snap.jobs.values() if j.state is JobState.PENDING and j.checkpoint is not None)
        pending = sum(1 for j in snap.jobs.values() if j.state is JobState.PENDING)
        commands = policy.decide(snap)
        times, cpu = _time(lambda snap=snap: policy.decide(snap), repeat)
        full = _time_plan(n_jobs, n_inst, catalog, repeat, located_share)
        kinds: dict[str, int] = {}
        for c in commands:
            kinds[type(c).__name__] = kinds.get(type(c).__name__, 0) + 1
        rows.append(
            {
                "jobs": n_jobs,
                "instances": n_inst,
                "offerings": len(catalog),
                "pending": pending,
                "located_checkpoints": located,
                "all_jobs": len(snap.jobs),
                "seconds": round(min(times), 4),
                "median": round(statistics.median(times), 4),
                "cpu_seconds": round(min(cpu), 4),
                "plan_seconds": round(full[0], 4) if full else None,
                "plan_cpu_seconds": round(full[1], 4) if full else None,
                "commands": kinds,
            }
        )
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            policy.decide(snap)
            prof.disable()
            print(f"\nprofile {n_jobs}x{n_inst}:", file=sys.stderr)
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, action="append")
    ap.add_argument("--instances", type=int, action="append")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--located-share", type=float, default=0.0,
                    help="share of pending jobs that resume from a located 50 GiB checkpoint (0..1)")  # fmt: skip
    args = ap.parse_args()
    if args.jobs:
        insts = args.instances or [max(1, j // 5) for j in args.jobs]
        sizes = list(zip(args.jobs, insts, strict=False))
    else:
        sizes = [(1000, 200), (10000, 2000)]
    if not 0.0 <= args.located_share <= 1.0:
        ap.error(f"--located-share {args.located_share}: give a share between 0 and 1")
    rows = run(sizes, repeat=args.repeat, profile=args.profile, located_share=args.located_share)
    print(
        f"{'jobs':>7} {'instances':>9} {'offerings':>9} {'pending':>8} {'seconds':>8} {'median':>8} {'cpu':>6} {'plan()':>7} {'cpu':>6}  commands"
    )
    for r in rows:
        cmds = " ".join(f"{k}={v}" for k, v in sorted(r["commands"].items()))
        print(
            f"{r['jobs']:>7} {r['instances']:>9} {r['offerings']:>9} {r['pending']:>8} {r['seconds']:>8.3f} "
            f"{r['median']:>8.3f} {r['cpu_seconds']:>6.3f} {r['plan_seconds'] or 0:>7.3f} {r['plan_cpu_seconds'] or 0:>6.3f}  {cmds}"
        )
    growth = rows[-1]["seconds"] / rows[0]["seconds"] if len(rows) > 1 and rows[0]["seconds"] else None
    cpu_growth = rows[-1]["cpu_seconds"] / rows[0]["cpu_seconds"] if len(rows) > 1 and rows[0]["cpu_seconds"] else None
    print(
        json.dumps(
            {
                "bench": "plan_scale",
                "what": "SpotfleetPolicy.decide",
                "rows": rows,
                "seconds": rows[-1]["seconds"],
                "growth": round(growth, 2) if growth else None,
                "cpu_seconds": rows[-1]["cpu_seconds"],
                "cpu_growth": round(cpu_growth, 2) if cpu_growth else None,
                "plan_seconds": rows[-1]["plan_seconds"],
                "located_share": args.located_share,
            }
        )
    )


if __name__ == "__main__":
    main()
