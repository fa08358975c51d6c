"""Whole workloads through the real ``Controller.step()``: a faulty fake cloud,
simulated agents (``driver.AgentDriver``), an injected clock, and the fleet
invariants checked after every step. Used by ``test_invariants.py`` (random
workloads, hypothesis) and ``bench/fault_run.py`` (a long fault run)."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from spotfleet.clock import FakeClock
from spotfleet.controller.apply import spend_rate
from spotfleet.controller.controller import Controller
from spotfleet.controller.settings import PlanSettings
from spotfleet.errors import InsufficientCapacity, ProviderError, QuotaExceeded, QuotaScope, Throttled
from spotfleet.model import InstanceState, JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Budget, sequential_ids
from spotfleet.model.spec import parse_spec
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import spend_rates
from spotfleet.policies.spotfleet import SpotfleetPolicy
from spotfleet.providers.base import TAG_JOB_IDS, CloudState, LaunchRequest, ProviderInstance
from spotfleet.providers.fake import FakeProvider, both_markets
from spotfleet.store import Store
from tests.controller.driver import AgentDriver, Script

TOKEN = "tok-"
FAULTS = ("capacity", "quota", "throttle", "5xx", "timeout", "lost")


def offerings() -> list[Any]:
    """1-GPU and 4-GPU boxes, spot and on-demand, in two zones."""
    out = []
    for zone in ("us-east-1a", "us-east-1b"):
        out += both_markets("p3.2xlarge", zone=zone, spot=0.9, on_demand=3.06)
        out += both_markets("p3.8xlarge", gpus=4, zone=zone, spot=4.0, on_demand=12.24)
    return out


@dataclass
class FaultyProvider(FakeProvider):
    """The fake cloud failing some calls: ``faults`` is consumed one entry per
    launch/terminate/list call (None: the call works); when it runs out,
    ``rate`` draws from ``rng``. Kinds: capacity, quota, throttle, 5xx,
    timeout (nothing done), lost (done, then the answer is lost)."""

    faults: list[str | None] = field(default_factory=list)
    launch_faults: list[str | None] = field(default_factory=list)  # consumed by launches first
    rate: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    injected: Counter[str] = field(default_factory=Counter)
    created: Counter[str] = field(default_factory=Counter)  # request id → instances built for it
    enabled: bool = True

    def _fault(self, call: str) -> str | None:
        if not self.enabled:
            return None
        if call == "launch" and self.launch_faults:
            kind = self.launch_faults.pop(0)
            if kind is not None:
                self.injected[f"{call}:{kind}"] += 1
            return kind
        if self.faults:
            kind = self.faults.pop(0)
        elif self.rate and self.rng.random() < self.rate:
            kind = self.rng.choice(FAULTS)
        else:
            return None
        if kind is not None:
            self.injected[f"{call}:{kind}"] += 1
        return kind

    def _raise(self, kind: str, request: LaunchRequest | None = None) -> None:
        if kind == "capacity" and request is not None:
            raise InsufficientCapacity([request.offering])
        if kind == "quota" and request is not None:
            raise QuotaExceeded("vCPU limit", scope=QuotaScope.FAMILY)
        if kind == "throttle":
            raise Throttled(1.0)
        if kind == "5xx":
            raise ProviderError("HTTP 503 Service Unavailable")
        raise ProviderError("read timed out")

    def launch(self, request: LaunchRequest) -> list[ProviderInstance]:
        kind = self._fault("launch")
        if kind is not None and kind != "lost":
            self.calls.append(("launch", request))
            self._raise(kind, request)
        before = set(self.instances)
        made = super().launch(request)
        for _pid in set(self.instances) - before:
            self.created[request.request_id] += 1
        if kind == "lost":
            raise ProviderError("read timed out (the launch went through)")
        return made

    def terminate(self, provider_ids: Sequence[str], *, request_id: str) -> None:
        kind = self._fault("terminate")
        if kind in ("capacity", "quota"):
            kind = "5xx"
        if kind is not None and kind != "lost":
            self._raise(kind)
        super().terminate(provider_ids, request_id=request_id)
        if kind == "lost":
            raise ProviderError("read timed out (the terminate went through)")

    def list_instances(self) -> list[ProviderInstance]:
        kind = self._fault("list")
        if kind is not None:
            self._raise("throttle" if kind == "throttle" else "5xx")
        return super().list_instances()


@dataclass(frozen=True)
class JobPlan:
    """One job of a workload."""

    priority: str = "normal"
    gpus: int = 1
    nodes: int = 1
    tenant: str = "a"
    work_s: float = 120.0
    exit_codes: tuple[int, ...] = ()
    max_retries: int = 3
    deadline_h: float | None = None
    submit_step: int = 0
    node_error: bool = False
    checkpoint_s: float = 0.0  # asked to drain, it exits this long after (staggered exits)


@dataclass
class Fleet:
    controller: Controller
    provider: FaultyProvider
    clock: FakeClock
    store: Store
    driver: AgentDriver
    budgets: tuple[Budget, ...]
    jobs: dict[str, JobPlan] = field(default_factory=dict)
    submitted_at: dict[str, datetime] = field(default_factory=dict)
    steps: int = 0
    violations: list[str] = field(default_factory=list)
    critical_waits: dict[str, int] = field(default_factory=dict)
    quota_seen_at: datetime | None = None

    # ------------------------------------------------------------ running

    def submit(self, plan: JobPlan) -> str:
        spec: dict[str, Any] = {
            "name": f"w{len(self.jobs)}", "command": ["python", "train.py"], "priority": plan.priority,
            "tenant": plan.tenant, "max_retries": plan.max_retries,
            "resources": {"gpus": plan.gpus, "nodes": plan.nodes},
            "expected_duration": f"{int(plan.work_s)}s",
        }  # fmt: skip
        if plan.deadline_h is not None:
            spec["deadline"] = (self.clock.now() + timedelta(hours=plan.deadline_h)).isoformat()
        job = self.controller.submit(parse_spec(spec))
        self.jobs[job.id] = plan
        self.submitted_at[job.id] = self.clock.now()
        self.driver.scripts[job.id] = Script(
            work_s=plan.work_s, exit_codes=list(plan.exit_codes), checkpoint_s=plan.checkpoint_s,
            node_error="CUDA error: an illegal memory access was encountered" if plan.node_error else None,
        )  # fmt: skip
        return job.id

    def step(self, dt: float) -> None:
        self.driver.tick(self.clock.now())
        self.controller.step()
        self.steps += 1
        self.check()
        self.clock.advance(dt)

    def reclaim_one(self, rng: random.Random) -> None:
        """The cloud reclaims a running spot instance (notice now, gone after it)."""
        spot = [i for i in self.provider.running() if i.market is Market.SPOT]
        if spot:
            victim = rng.choice(sorted(spot, key=lambda i: i.provider_id))
            self.provider.preempt(victim.provider_id, notice=timedelta(seconds=30))
            self._reclaims.append((self.clock.now() + timedelta(seconds=30), victim.provider_id))

    def settle_reclaims(self) -> None:
        now = self.clock.now()
        for at, pid in list(self._reclaims):
            if at <= now:
                self._reclaims.remove((at, pid))
                if self.provider.instances[pid].state is not CloudState.TERMINATED:
                    self.provider.reclaim(pid)

    def __post_init__(self) -> None:
        self._reclaims: list[tuple[datetime, str]] = []

    # ------------------------------------------------------------ invariants

    def check(self) -> None:
        """The fleet invariants, after every step (violations are collected)."""
        now = self.clock.now()
        instances = self.store.list_instances(live_only=True)
        state = self.store.load_state()
        rate = spend_rate(instances)
        _, tenants = spend_rates(instances, state.jobs.values())
        for b in self.budgets:
            spent = rate if b.tenant is None else tenants.get(b.tenant, 0.0)
            if spent > b.max_per_hour + 1e-6:
                self.violations.append(f"step {self.steps}: spend ${spent:.2f}/h over {b}")
        # no job has two live attempts
        open_attempts: dict[str, set[int]] = {}
        for inst in instances:
            for job_id, attempt, _rank in self.store.open_attempts_on(inst.id):
                open_attempts.setdefault(job_id, set()).add(attempt)
        for job_id, attempts in open_attempts.items():
            if len(attempts) > 1:
                self.violations.append(f"step {self.steps}: {job_id} has live attempts {sorted(attempts)}")
        # launches per job per hour bounded (no livelock)
        per_job = self.launches_per_job()
        for job_id, n in per_job.items():
            hours = max(1.0, (now - self.submitted_at.get(job_id, now)).total_seconds() / 3600)
            if n > 20 * hours:
                self.violations.append(f"step {self.steps}: {job_id} launched {n}× in {hours:.1f} h")
        # a critical job that fits under the cap after preempting lower tiers starts within bounded time
        if self.provider.injected and any(k.endswith("quota") for k in self.provider.injected):
            self.quota_seen_at = self.quota_seen_at or now
        for job_id, plan in self.jobs.items():
            if plan.priority != "critical" or job_id not in state.jobs:
                continue
            job = state.jobs[job_id]
            if job.state is not JobState.PENDING or not self._critical_fits(plan, state.jobs, instances):
                self.critical_waits.pop(job_id, None)
                continue
            waited = self.critical_waits[job_id] = self.critical_waits.get(job_id, 0) + 1
            if waited > CRITICAL_STEPS and self.quota_seen_at is None and job.failures == 0:
                self.violations.append(f"step {self.steps}: critical {job_id} pending {waited} steps: {job.message}")

    def _critical_fits(self, plan: JobPlan, jobs: dict[str, Any], instances: list[Any]) -> bool:
        """Would its on-demand launch fit under every cap once lower tiers were preempted?"""
        price = 3.06 * plan.gpus * plan.nodes if plan.gpus < 4 else 12.24 * plan.nodes
        pinned = 0.0  # instances running anything that is not opportunistic
        for inst in instances:
            if inst.state is InstanceState.TERMINATING:
                continue
            on = [j for j in jobs.values() if inst.id in j.instance_ids and not j.terminal]
            if any(j.spec.priority.value != "opportunistic" for j in on) or inst.reserved_for is not None:
                pinned += inst.offering.price_per_hour
        for b in self.budgets:
            if b.tenant is None and pinned + price > b.max_per_hour + 1e-9:
                return False
            if b.tenant == plan.tenant and price > b.max_per_hour + 1e-9:
                return False
        return True

    def launches_per_job(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for req in self.provider.calls_named("launch"):
            for j in filter(None, req.tags.get(TAG_JOB_IDS, "").split(",")):
                out[j] += 1
        return out

    # ------------------------------------------------------------ end

    def unfinished(self) -> list[str]:
        active = self.store.load_state().jobs
        return [j for j in self.jobs if j in active]

    def leaked(self) -> list[str]:
        """Cloud instances still running that the store does not hold live."""
        live = {i.provider_id for i in self.store.list_instances(live_only=True)}
        return [i.provider_id for i in self.provider.running() if i.provider_id not in live]

    def duplicates(self) -> int:
        """Cloud instances built beyond one per request id."""
        return sum(n - 1 for n in self.provider.created.values() if n > 1)


CRITICAL_STEPS = 40  # × 15 s steps: 10 minutes (a capacity backoff of 5, a drain of 2, margin)


_TEMPLATE: dict[str, Path] = {}


def fresh_store(tmp: Path) -> Store:
    """A migrated SQLite store (migrations run once; later stores copy the file)."""
    template = _TEMPLATE.get("db")
    if template is None or not template.exists():
        template = tmp / "template.db"
        s = Store(f"sqlite:///{template}")
        s.migrate()
        s.close()
        _TEMPLATE["db"] = template
    n = len(list(tmp.glob("w*.db")))
    path = tmp / f"w{n}.db"
    shutil.copy(template, path)
    return Store(f"sqlite:///{path}")


def make_fleet(store: Store, tmp: Path, *, budgets: tuple[Budget, ...] = (), faults: Sequence[str | None] = (),
               rate: float = 0.0, seed: int = 0) -> Fleet:  # fmt: skip
    clock = FakeClock()
    provider = FaultyProvider(offering_list=offerings(), clock=clock, faults=list(faults), rate=rate,
                              rng=random.Random(seed))  # fmt: skip
    settings = PlanSettings(request_timeout=timedelta(minutes=3),
                            vanish_grace=timedelta(seconds=30), quota_backoff=timedelta(minutes=3))  # fmt: skip
    controller = Controller(store=store, providers={"fake": provider}, clock=clock, data_dir=tmp,
                            controller_url=lambda: "http://127.0.0.1:8478",
                            policy=SpotfleetPolicy(Knobs(idle_ttl_s=120)), settings=settings, budgets=budgets,
                            new_id=sequential_ids())  # fmt: skip
    controller.executor.token_factory = lambda instance_id: TOKEN + instance_id
    driver = AgentDriver(controller, provider, store, token=lambda i: TOKEN + i, beat_every_s=45.0)
    return Fleet(controller, provider, clock, store, driver, budgets)


def run_until_done(
    fleet: Fleet, *, dt: float, max_steps: int, until: Callable[[], bool] | None = None
) -> Iterator[int]:
    """Step until every job is terminal and nothing runs (or ``max_steps``)."""
    done = until or (lambda: not fleet.unfinished() and not fleet.provider.running())
    for n in range(max_steps):
        fleet.settle_reclaims()
        fleet.step(dt)
        yield n
        if done():
            return
