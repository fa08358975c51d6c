"""Chaos for replicated controllers: N ``spotfleet up`` replicas on PostgreSQL
(local provider), a stream of checkpointing jobs, and the leader killed with
SIGKILL at random points ``--kills`` times (a fresh replica replaces it).

    python bench/ha_chaos.py --kills 50 [--replicas 3] [--lease-ttl 10] [--pg URL]

Prints the failover times (kill → a replica leads with a higher epoch) and the
counts that must be zero — duplicate launches, double binds, lost jobs, leaked
instances, jobs that needed a second attempt — then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine, text

from tests.e2e.ha_cluster import Cluster, chaos_job, percentile


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--lease-ttl", type=float, default=10.0, help="seconds (the default config's)")
    p.add_argument("--renew-every", type=float, default=2.0)
    p.add_argument("--jobs-per-kill", type=int, default=2)
    p.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres", help="admin URL")
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--api-workers", type=int, default=0, help="each replica's API worker processes")
    args = p.parse_args(argv)

    name = f"spotfleet_chaos_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ha-chaos-") as tmp:
        cluster = Cluster(database=f"{args.pg.rsplit('/', 1)[0]}/{name}", data_dir=Path(tmp),
                          replicas=args.replicas, lease_ttl=args.lease_ttl, renew_every=args.renew_every,
                          api_workers=args.api_workers)  # fmt: skip
        try:
            cluster.start_all()
            ids = []
            for k in range(args.kills):
                ids += [cluster.submit(chaos_job(f"k{k}-{n}", rng.randint(10, 60))) for n in range(args.jobs_per_kill)]
                time.sleep(rng.uniform(0.0, 2.0))
                kill = cluster.kill_leader()
                print(f"kill {k + 1:3d}: pid {kill.pid} (epoch {kill.epoch}) → new leader in {kill.failover_s:.1f}s",
                      flush=True)  # fmt: skip
            deadline = time.monotonic() + 300
            while not all(j["state"] == "succeeded" for j in cluster.jobs()) and time.monotonic() < deadline:
                time.sleep(0.5)
            while cluster.invariants()["leaked_instances"] and time.monotonic() < deadline:
                time.sleep(0.5)
            found = cluster.invariants()
        finally:
            cluster.stop()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
    failovers = [k.failover_s for k in cluster.kills if k.failover_s is not None]
    figures = {
        "kills": len(failovers), "replicas": args.replicas, "lease_ttl_s": args.lease_ttl,
        "renew_every_s": args.renew_every, "jobs": len(ids), "api_workers": args.api_workers,
        "orphaned_workers": sum(k.orphans for k in cluster.kills),
        "failover_p50_s": round(percentile(failovers, 50), 2), "failover_p99_s": round(percentile(failovers, 99), 2),
        "failover_max_s": round(max(failovers), 2), **found, "wall_s": round(time.monotonic() - started, 1),
    }  # fmt: skip
    print(f"\n{figures['kills']} leader kills, {args.replicas} replicas, lease TTL {args.lease_ttl:g}s: failover "
          f"p50 {figures['failover_p50_s']}s, p99 {figures['failover_p99_s']}s, max {figures['failover_max_s']}s")  # fmt: skip
    for key in ("duplicate_launches", "double_binds", "lost_jobs", "leaked_instances", "unknown_instances",
                "repeated_attempts"):  # fmt: skip
        print(f"  {key:20s} {found[key]}")
    print(f"  {'orphaned_workers':20s} {figures['orphaned_workers']}")
    print(json.dumps(figures))
    bad = any(found[k] for k in ("duplicate_launches", "double_binds", "lost_jobs", "leaked_instances"))
    bad = bad or figures["orphaned_workers"] > 0
    return 1 if bad or figures["failover_p99_s"] > 15 else 0


if __name__ == "__main__":
    raise SystemExit(main())
