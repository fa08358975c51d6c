"""The long-running controller: one reconcile step at a time, plus the user
entry points the API calls (the agents' are in ``controller/agents.py``).

``step()`` is a plain method: APScheduler triggers it on an interval and on
events (job submitted, agent report), tests and the simulator call it directly.
Only ``step()`` changes lifecycle state; ``submit``/``cancel``/agent calls only
write their inbox and wake the step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotfleet.clock import Clock
from spotfleet.controller import partitions
from spotfleet.controller.agents import AgentGateway
from spotfleet.controller.availability import AvailabilityLog
from spotfleet.controller.executor import ExecutionResult, Executor
from spotfleet.controller.logs import JobLogs
from spotfleet.controller.plan import Plan, plan
from spotfleet.controller.settings import PlanSettings
from spotfleet.controller.sync import Observation
from spotfleet.errors import Fenced, InvalidSpec, ProviderError
from spotfleet.model.changes import EventRecord, FleetHold, PendingNotice
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import InstanceState
from spotfleet.model.job import Job, JobState
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.model.partition import DEFAULT_PARTITIONS, PartitionPolicy
from spotfleet.model.snapshot import Budget, PoolExposure, RunRecord, Snapshot, random_ids
from spotfleet.model.spec import JobSpec
from spotfleet.policies.base import Policy
from spotfleet.providers.base import Provider, ProviderInstance, SupportsInterrupt
from spotfleet.store.store import Store

if TYPE_CHECKING:
    from spotfleet.store.election import Elector, Leadership

log = logging.getLogger(__name__)

_HOLDING = frozenset({InstanceState.PROVISIONING, InstanceState.RUNNING})


@dataclass(slots=True)
class StepReport:
    at: datetime
    plans: int = 0
    launched: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    rejected: int = 0
    provider_errors: list[str] = field(default_factory=list)
    skipped: str | None = None  # why no step ran (a follower replica, or fenced mid-step)


class Controller:
    def __init__(
        self,
        *,
        store: Store,
        providers: Mapping[str, Provider],
        policy: Policy,
        clock: Clock,
        cluster: str = "default",
        settings: PlanSettings | None = None,
        budgets: Sequence[Budget] = (),
        data_dir: Path,
        controller_url: Callable[[], str],
        checkpoint_root: str | None = None,
        heartbeat_seconds: float = 2.0,
        offerings_ttl: timedelta = timedelta(minutes=10),
        new_id: Callable[[str], str] | None = None,
        partition_policy: PartitionPolicy = DEFAULT_PARTITIONS,
    ) -> None:
        self.store = store
        self.providers = dict(providers)
        self.policy = policy
        self.clock = clock
        self.cluster = cluster
        self.settings = settings or PlanSettings()
        self.budgets = tuple(budgets)
        self.data_dir = data_dir
        self.checkpoint_root = checkpoint_root or str(data_dir / "checkpoints")
        self.heartbeat_seconds = heartbeat_seconds
        self.offerings_ttl = offerings_ttl
        self.new_id = new_id or random_ids()
        self.executor = Executor(store=store, providers=self.providers, cluster=cluster, controller_url=controller_url)
        self._step_lock = threading.Lock()
        self._offerings: Offerings = Offerings()
        self._offerings_at: datetime | None = None
        self.availability = AvailabilityLog()  # spot run lengths seen by this process (forecast input)
        self.wake: Callable[[], None] = lambda: None
        self.last_plan: Plan | None = None
        self.history_ttl = timedelta(minutes=5)
        self._history_at: datetime | None = None
        self._history_cache: tuple[tuple[RunRecord, ...], tuple[PoolExposure, ...]] = ((), ())
        self.started_at = clock.now()
        self.last_step_at: datetime | None = None  # health, for `spotfleet status`
        self.last_step_error: str | None = None
        self.step_interval = timedelta(seconds=5)  # the scheduler's; health counts a step late after 3 of these
        self.partition_policy = partition_policy  # MIG layouts, MPS, memory enforcement (controller/partitions.py)
        self.job_logs = JobLogs(data_dir / "logs")
        self.agents = AgentGateway(
            store=store, clock=clock, logs=self.job_logs, checkpoint_root=self.checkpoint_root,
            heartbeat_seconds=heartbeat_seconds, partition_policy=partition_policy, wake=lambda: self.wake(),
        )  # fmt: skip
        self.elector: Leadership | None = None  # replicated controllers: step only while leading (store/election.py)

    def lead_with(self, elector: Elector) -> None:
        """Step only while ``elector`` holds the lease; fence every write and cloud call."""
        self.elector = elector
        self.executor.before_cloud_call = elector.verify

    # ------------------------------------------------------------ users

    def submit(self, spec: JobSpec) -> Job:
        """One submission: the job and its ``job.submitted`` event in one transaction."""
        return self.submit_many([spec])[0]

    def submit_many(self, specs: Sequence[JobSpec]) -> list[Job]:
        """Many submissions, one transaction, one wake (``spotfleet submit`` of many files)."""
        now = self.clock.now()
        # a microsecond apart, so listings keep the batch's order (ids are random)
        jobs = [Job(id=self.new_id("job"), spec=spec, state=JobState.PENDING,
                    created_at=now + timedelta(microseconds=i), state_since=now) for i, spec in enumerate(specs)]  # fmt: skip
        self.store.add_jobs(jobs, [
            EventRecord(at=now, kind="job.submitted", message=f"{job.id} ({job.spec.name}) submitted", job_id=job.id)
            for job in jobs
        ])  # fmt: skip
        self.wake()
        return jobs

    def cancel(self, job_id: str) -> Job:
        job = self.store.request_cancel(job_id)
        self.wake()
        return job

    def down(self, *, grace: timedelta, reason: str = "spotfleet down") -> FleetHold:
        """Hold the fleet: from the next step on, buy nothing, drain every busy
        instance (jobs checkpoint and wait, pending) and give every instance back.
        Written to the store like any inbox item, so the step applies it."""
        now = self.clock.now()
        hold = self.store.set_fleet_hold(self.cluster, FleetHold(now, reason, grace.total_seconds()))
        self.store.add_event(EventRecord(at=now, kind="fleet.down", level="warning",
                                         message=f"fleet going down: {reason}; jobs checkpoint within "
                                                 f"{grace.total_seconds():.0f}s and wait for `spotfleet resume`"))  # fmt: skip
        self.wake()
        return hold

    def resume(self) -> bool:
        """Lift a ``down``: the next step buys capacity for the waiting jobs again."""
        lifted = self.store.clear_fleet_hold(self.cluster)
        if lifted:
            self.store.add_event(EventRecord(at=self.clock.now(), kind="fleet.resumed",
                                             message="fleet resumed: pending jobs will be placed again"))  # fmt: skip
            self.wake()
        return lifted

    def health(self) -> dict[str, Any]:
        """Is the reconcile loop alive? ``ok``, ``starting``, ``failing`` (the last
        step raised) or ``stale`` (no step for three intervals)."""
        now = self.clock.now()
        late = self.step_interval * 3 + timedelta(seconds=10)
        ha = self.elector.status() if self.elector is not None else {"role": "leader", "epoch": None, "leader": {}}
        if ha["role"] == "follower":
            state = "ok"  # a standby: healthy while it serves the API and watches the lease
        elif self.last_step_error is not None:
            state = "failing"
        elif self.last_step_at is None:
            state = "starting" if now - self.started_at <= late else "stale"
        else:
            state = "ok" if now - self.last_step_at <= late else "stale"
        return {
            "health": state,
            "started_at": self.started_at.isoformat(),
            "last_step_at": self.last_step_at.isoformat() if self.last_step_at else None,
            "last_step_error": self.last_step_error,
            "step_interval_seconds": self.step_interval.total_seconds(),
            **ha,
        }

    def active_policy(self) -> Policy:
        """The configured policy, or the teardown policy while the fleet is held."""
        hold = self.store.fleet_hold(self.cluster)
        if hold is None:
            return self.policy
        from spotfleet.policies.teardown import TeardownPolicy

        return TeardownPolicy(grace=timedelta(seconds=hold.grace_seconds), reason=hold.reason)

    def interrupt(self, instance_id: str, *, kind: NoticeKind, notice: timedelta) -> datetime:
        """Have the provider announce a reclaim of one instance (local/fake/sim only)."""
        inst = self.store.get_instance(instance_id)
        provider: object = self.providers.get(inst.provider)  # widened: interrupt is an optional capability
        if not isinstance(provider, SupportsInterrupt):
            raise InvalidSpec(
                "instance", f"{inst.provider} instances cannot be interrupted on demand (local provider only)"
            )
        if inst.provider_id is None or not inst.live:
            raise InvalidSpec("instance", f"{instance_id} is {inst.state.value}: nothing to interrupt")
        deadline = provider.interrupt(inst.provider_id, kind=kind, notice=notice)
        self.store.add_event(EventRecord(at=self.clock.now(), kind="instance.interrupt_injected", instance_id=inst.id,
                                         message=f"{kind.value} notice injected on {inst.id}, deadline {deadline:%H:%M:%S}"))  # fmt: skip
        self.wake()
        return deadline

    # ------------------------------------------------------------ offerings

    def offerings(self, *, refresh: bool = False) -> Offerings:
        now = self.clock.now()
        stale = self._offerings_at is None or now - self._offerings_at > self.offerings_ttl
        if refresh or stale:
            items: list[Offering] = []
            for name, provider in self.providers.items():
                try:
                    items.extend(provider.offerings())
                except ProviderError as exc:
                    log.warning("offerings of %s unavailable: %s", name, exc)
                    items.extend(o for o in self._offerings if o.provider == name)
            self._offerings, self._offerings_at = Offerings(items), now
        return self._offerings

    def known_gpus(self) -> frozenset[str]:
        """GPU models a spec may ask for: the throughput catalogue and every offering."""
        from spotfleet.policies.throughput import GPU_SPECS

        try:
            offered = {o.gpu for o in self.offerings()}
        except ProviderError:
            offered = set()
        return frozenset(GPU_SPECS) | offered

    # ------------------------------------------------------------ the step

    def step(self) -> StepReport:
        """observe → plan → act; re-plans (up to 3 times) after capacity errors.

        Records when it last finished (``last_step_at``) and why it last failed
        (``last_step_error``) for ``spotfleet status``; a failure still raises.
        A follower replica (``elector`` not leading) does nothing; a leader fenced
        mid-step stops there (its successor re-plans from the store)."""
        if self.elector is not None and not self.elector.is_leader:
            return StepReport(at=self.clock.now(), skipped="follower")
        try:
            report = self._step()
        except Fenced as exc:
            log.warning("step abandoned: %s", exc)
            return StepReport(at=self.clock.now(), skipped=f"fenced: {exc}")
        except Exception as exc:
            self.last_step_error = f"{type(exc).__name__}: {exc}"
            raise
        self.last_step_at, self.last_step_error = report.at, None
        return report

    def _step(self) -> StepReport:
        with self._step_lock, self.store.fenced(self.elector):
            now = self.clock.now()
            report = StepReport(at=now)
            listed: dict[str, Sequence[ProviderInstance]] = {}
            events: list[InstanceEvent] = []
            for name, provider in self.providers.items():
                try:
                    listed[name] = provider.list_instances()
                    events.extend(provider.poll_events())
                except ProviderError as exc:
                    report.provider_errors.append(f"{name}: {exc}")
                    self.store.add_event(EventRecord(at=now, kind="provider.error", level="warning",
                                                     message=f"observing {name} failed: {exc}"))  # fmt: skip
            self.store.add_notices(events)
            policy = self.active_policy()
            for attempt in range(3):
                snapshot, notices = self.snapshot(now)
                observation = Observation(listed=listed if attempt == 0 else {}, notices=notices)
                result_plan = plan(snapshot, policy, observation=observation, settings=self.settings)
                self.last_plan = result_plan
                result: ExecutionResult = self.executor.execute(result_plan)
                report.plans += 1
                report.launched += result.launched
                report.terminated += result.terminated
                report.rejected += len(result_plan.rejected)
                if not result.should_replan:
                    break
            return report

    def snapshot(self, now: datetime | None = None) -> tuple[Snapshot, list[PendingNotice]]:
        """What ``plan()`` reads: the store's live state, offerings and history."""
        now = now or self.clock.now()
        state = self.store.load_state()
        runs, exposure = self._history(now)
        offerings = partitions.annotate(self.offerings(), state.instances, state.presence, self.partition_policy)
        held = {
            i.offering.key
            for i in state.instances.values()
            if i.market is Market.SPOT and i.state in _HOLDING and i.notice_kind is None
        }
        self.availability.observe(now, offerings, state.unavailable, held)
        retried = [j.id for j in state.jobs.values() if j.failures or j.interruptions]
        snapshot = Snapshot(
            now=now, jobs=state.jobs, instances=state.instances, offerings=offerings,
            reports=state.reports, presence=state.presence, unavailable=state.unavailable,
            budgets=self.budgets, new_id=self.new_id, runs=runs, exposure=exposure,
            avoid=self.store.instances_to_avoid(retried), availability=self.availability.records(now),
        )  # fmt: skip
        return snapshot, state.notices

    def _history(self, now: datetime) -> tuple[tuple[RunRecord, ...], tuple[PoolExposure, ...]]:
        """Forecast inputs, re-read at most every ``history_ttl`` (they move slowly)."""
        if self._history_at is None or now - self._history_at > self.history_ttl:
            self._history_cache = (tuple(self.store.run_history()), tuple(self.store.pool_exposure(now=now)))
            self._history_at = now
        return self._history_cache

    def explain(self, job_id: str) -> dict[str, Any]:
        """Why a job is where it is, or why it is still pending (see policies.explain)."""
        from spotfleet.ledger.usage import load_usage
        from spotfleet.policies.explain import explain_job

        snapshot, _ = self.snapshot()
        if job_id not in snapshot.jobs:
            snapshot.jobs[job_id] = self.store.get_job(job_id)  # finished jobs too; NotFound if unknown
        from spotfleet.policies.spotfleet import SpotfleetPolicy

        policy = self.active_policy()
        own = policy if isinstance(policy, SpotfleetPolicy) else None
        out = explain_job(
            snapshot, job_id, policy=own, configured=getattr(policy, "name", type(policy).__name__)
        ).to_dict()
        job = snapshot.jobs[job_id]
        out["extra"].update(
            partitions.explain_extra(job, snapshot.instances.values(), load_usage(self.store, [job_id]))
        )
        return out

    # ------------------------------------------------------------ logs

    def logs(self, job_id: str, *, attempt: int | None = None) -> str:
        """Rank 0's log of one attempt, or of every attempt with a header each."""
        job = self.store.get_job(job_id)
        return self.job_logs.read(job_id, [attempt] if attempt is not None else list(range(1, job.attempt + 1)))

    def log_bytes(self, job_id: str, *, attempt: int, offset: int = 0, node_rank: int = 0) -> bytes:
        self.store.get_job(job_id)  # NotFound for an unknown job
        return self.job_logs.read_bytes(job_id, attempt=attempt, offset=offset, node_rank=node_rank)

    def get_job(self, job_id: str) -> Job:
        return self.store.get_job(job_id)
