"""Where does one reconcile step (``Controller.step()``) spend its time at fleet scale?

Builds the state ``bench/fleet_load.py`` drives a live controller into — a
backlog of pending opportunistic jobs asking for a GPU no provider sells
(``gpu_types: [B300]``: they stay pending and every step plans over all of
them) and RUNNING instances of an unconfigured provider (``fake``), each with
a registered agent — in a fresh database, then runs steps of a controller
built like the tests' (a fake provider named ``local`` selling the local
provider's offerings, a fake clock advanced 5 s between steps, the default
``spotfleet`` policy with ``spotfleet up``'s settings of fleet_load) and
reports each phase's time:

    python bench/step_profile.py                       # PostgreSQL, 10,000 jobs, 2,000 instances
    python bench/step_profile.py --database sqlite     # a temp SQLite file
    python bench/step_profile.py --jobs 10000 --instances 2000 --steps 5 --profile

PostgreSQL: a uniquely named database is created through ``--pg`` (the admin
URL) and dropped at the end. The first step (offerings fetched, every spec
parsed) is shown apart; mean and median are of the ``--steps`` after it.
Phases nest: ``snapshot`` holds ``load_state``, ``history``, ``offerings``,
``availability`` and ``avoid``; ``plan`` holds ``sync``, ``decide``, ``apply``;
``execute`` holds ``commit``. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine, text

from spotfleet.clock import FakeClock
from spotfleet.controller import controller as controller_module
from spotfleet.controller import partitions
from spotfleet.controller import plan as plan_module
from spotfleet.controller.controller import Controller
from spotfleet.controller.settings import PlanSettings
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.snapshot import sequential_ids
from spotfleet.model.spec import parse_spec
from spotfleet.policies.knobs import DEFAULT_KNOBS
from spotfleet.policies.spotfleet import SpotfleetPolicy
from spotfleet.providers.fake import FakeProvider, gpu_offering
from spotfleet.providers.local import local_offerings
from spotfleet.store import Store
from spotfleet.store.store import Changes
from spotfleet.wire import RegisterRequest

SPEC = {"name": "backlog", "command": "true", "priority": "opportunistic", "resources": {"gpu_types": ["B300"]}}
TOKEN = "bench-agent-"
PHASES = ["step", "snapshot", "load_state", "history", "offerings", "availability", "avoid",
          "plan", "sync", "decide", "apply", "execute", "commit"]  # fmt: skip


class Timer:
    """Seconds per phase, accumulated over one step."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}

    def wrap(self, owner: Any, attr: str, phase: str) -> None:
        inner = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.current[phase] = self.current.get(phase, 0.0) + time.perf_counter() - t0

        setattr(owner, attr, timed)


def instrument(controller: Controller, timer: Timer) -> None:
    store = controller.store
    timer.wrap(controller, "snapshot", "snapshot")
    timer.wrap(store, "load_state", "load_state")
    timer.wrap(controller, "_history", "history")
    timer.wrap(partitions, "annotate", "offerings")
    timer.wrap(controller.availability, "observe", "availability")
    timer.wrap(controller.availability, "records", "availability")
    timer.wrap(store, "instances_to_avoid", "avoid")
    timer.wrap(controller_module, "plan", "plan")
    timer.wrap(plan_module, "sync", "sync")
    timer.wrap(controller.policy, "decide", "decide")
    timer.wrap(plan_module, "apply_commands", "apply")
    timer.wrap(controller.executor, "execute", "execute")
    timer.wrap(store, "commit", "commit")


def build(url: str, data_dir: Path, *, jobs: int, instances: int) -> tuple[Controller, FakeClock]:
    store = Store(url)
    store.migrate()
    clock = FakeClock()
    provider = FakeProvider(clock=clock, name="local", offering_list=list(local_offerings()))
    policy = SpotfleetPolicy(replace(DEFAULT_KNOBS, idle_ttl_s=timedelta(hours=10).total_seconds()))
    controller = Controller(
        store=store, providers={"local": provider}, policy=policy, clock=clock, data_dir=data_dir,
        controller_url=lambda: "http://127.0.0.1:8478", new_id=sequential_ids(),
        settings=PlanSettings(agent_timeout=timedelta(minutes=10)),
    )  # fmt: skip
    spec = parse_spec(SPEC)
    for k in range(0, jobs, 500):  # as POST /v1/jobs/batch does
        controller.submit_many([spec] * min(500, jobs - k))
    now = clock.now()
    o = gpu_offering(gpus=1)
    batch = [
        (Instance(id=f"sf-load-{i:05d}", offering=o, request_id=f"load-{i}", state=InstanceState.RUNNING,
                  created_at=now, state_since=now, provider_id=f"fake-{i}", launched_at=now), TOKEN + str(i))
        for i in range(instances)
    ]  # fmt: skip
    for k in range(0, instances, 500):
        store.commit(Changes(new_instances=batch[k : k + 500]), now=now)
    for i in range(instances):
        controller.agents.register(TOKEN + str(i), RegisterRequest(provider_id=f"fake-{i}", gpus=1))
    return controller, clock


@contextmanager
def database(kind: str, admin_url: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="step-profile-") as tmp:
            yield f"sqlite:///{tmp}/spotfleet.db"
        return
    name = f"spotfleet_step_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{admin_url.rsplit('/', 1)[0]}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def run_steps(controller: Controller, clock: FakeClock, timer: Timer, n: int,
              profile: cProfile.Profile | None = None) -> list[dict[str, float]]:  # fmt: skip
    out = []
    for _ in range(n):
        clock.advance(5)
        timer.current = {}
        if profile is not None:
            profile.enable()
        t0 = time.perf_counter()
        controller.step()
        timer.current["step"] = time.perf_counter() - t0
        if profile is not None:
            profile.disable()
        out.append(dict(timer.current))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=10000, help="pending backlog (unplaceable)")
    p.add_argument("--instances", type=int, default=2000, help="RUNNING instances with agents")
    p.add_argument("--steps", type=int, default=5, help="measured steps, after one warm-up step")
    p.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    p.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres", help="admin URL")
    p.add_argument("--profile", action="store_true", help="cProfile of the measured steps: top 25 by cumulative")
    args = p.parse_args(argv)

    out: dict[str, Any] = {"bench": "step_profile", "database": args.database, "jobs": args.jobs,
                           "instances": args.instances, "steps": args.steps, "cpus": os.cpu_count(),
                           "load_avg_1m": round(os.getloadavg()[0], 1)}  # fmt: skip
    prof = cProfile.Profile() if args.profile else None
    with database(args.database, args.pg) as url, tempfile.TemporaryDirectory(prefix="step-profile-data-") as tmp:
        t0 = time.perf_counter()
        controller, clock = build(url, Path(tmp), jobs=args.jobs, instances=args.instances)
        out["setup_s"] = round(time.perf_counter() - t0, 1)
        timer = Timer()
        instrument(controller, timer)
        first = run_steps(controller, clock, timer, 1)[0]
        steps = run_steps(controller, clock, timer, args.steps, prof)
        plan = controller.last_plan
        out["pending"] = sum(1 for j in plan.snapshot.jobs.values() if j.state.value == "pending") if plan else None
        out["commands"] = len(plan.commands) if plan else None
        controller.store.close()
    out["first_step_s"] = round(first.get("step", 0.0), 3)
    out["phases"] = {
        phase: {"mean_s": round(statistics.mean(s.get(phase, 0.0) for s in steps), 4),
                "median_s": round(statistics.median(s.get(phase, 0.0) for s in steps), 4),
                "first_s": round(first.get(phase, 0.0), 4)}
        for phase in PHASES
    }  # fmt: skip
    out["step_mean_s"] = out["phases"]["step"]["mean_s"]
    out["step_median_s"] = out["phases"]["step"]["median_s"]
    print(f"{args.database}: {args.jobs} pending jobs, {args.instances} instances, {args.steps} steps "
          f"(setup {out['setup_s']} s, load avg {out['load_avg_1m']})")  # fmt: skip
    print(f"{'phase':14s} {'mean s':>8s} {'median s':>9s} {'first s':>8s}")
    nested = {"load_state", "history", "offerings", "availability", "avoid", "sync", "decide", "apply", "commit"}
    for phase, row in out["phases"].items():
        label = ("  " if phase in nested else "") + phase
        print(f"{label:14s} {row['mean_s']:8.3f} {row['median_s']:9.3f} {row['first_s']:8.3f}")
    if prof is not None:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
