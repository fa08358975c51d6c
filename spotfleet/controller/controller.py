"""The long-running controller: one reconcile step at a time, plus the agent
and user entry points the API calls.

``step()`` is a plain method: APScheduler triggers it on an interval and on
events (job submitted, agent report), tests and the simulator call it directly.
Only ``step()`` changes lifecycle state; ``submit``/``cancel``/agent calls only
write their inbox and wake the step.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from spotfleet.clock import Clock
from spotfleet.controller.executor import ExecutionResult, Executor
from spotfleet.controller.plan import Plan, plan
from spotfleet.controller.settings import PlanSettings
from spotfleet.controller.sync import Observation
from spotfleet.errors import InvalidSpec, ProviderError
from spotfleet.ledger.usage import UsageRecorder
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Checkpoint, Job, JobState
from spotfleet.model.offering import Offering, Offerings
from spotfleet.model.snapshot import Budget, NodeReport, PoolExposure, RunRecord, Snapshot, random_ids
from spotfleet.model.spec import JobSpec
from spotfleet.policies.base import Policy
from spotfleet.providers.base import Provider, ProviderInstance, SupportsInterrupt
from spotfleet.store.store import EventRecord, PendingNotice, Store
from spotfleet.wire import Assignment, DrainOrder, Heartbeat, HeartbeatResponse, LogChunk, RegisterRequest

log = logging.getLogger(__name__)


class Unauthorized(Exception):
    """An agent presented a token that matches no live instance."""


@dataclass(slots=True)
class StepReport:
    at: datetime
    plans: int = 0
    launched: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    rejected: int = 0
    provider_errors: list[str] = field(default_factory=list)


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
        checkpoint_root: str | None = None,
        heartbeat_seconds: float = 2.0,
        offerings_ttl: timedelta = timedelta(minutes=10),
        new_id: Callable[[str], str] | None = None,
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
        self.controller_url = "http://127.0.0.1:8478"
        self.executor = Executor(store=store, providers=self.providers, cluster=cluster,
                                 controller_url=lambda: self.controller_url)  # fmt: skip
        self._step_lock = threading.Lock()
        self._offerings: Offerings = Offerings()
        self._offerings_at: datetime | None = None
        self.wake: Callable[[], None] = lambda: None
        self.last_plan: Plan | None = None
        self.history_ttl = timedelta(minutes=5)
        self._history_at: datetime | None = None
        self._history_cache: tuple[tuple[RunRecord, ...], tuple[PoolExposure, ...]] = ((), ())
        self.usage = UsageRecorder(store)  # progress + GPU telemetry for the cost ledger

    # ------------------------------------------------------------ users

    def submit(self, spec: JobSpec) -> Job:
        now = self.clock.now()
        job = Job(id=f"job-{uuid.uuid4().hex[:10]}", spec=spec, state=JobState.PENDING, created_at=now, state_since=now)
        self.store.add_job(job)
        self.store.add_event(EventRecord(at=now, kind="job.submitted", message=f"{job.id} ({spec.name}) submitted",
                                         job_id=job.id))  # fmt: skip
        self.wake()
        return job

    def cancel(self, job_id: str) -> Job:
        job = self.store.request_cancel(job_id)
        self.wake()
        return job

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

    # ------------------------------------------------------------ the step

    def step(self) -> StepReport:
        """observe → plan → act; re-plans (up to 3 times) after capacity errors."""
        with self._step_lock:
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
            for attempt in range(3):
                snapshot, notices = self.snapshot(now)
                observation = Observation(listed=listed if attempt == 0 else {}, notices=notices)
                result_plan = plan(snapshot, self.policy, observation=observation, settings=self.settings)
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
        snapshot = Snapshot(
            now=now, jobs=state.jobs, instances=state.instances, offerings=self.offerings(),
            reports=state.reports, presence=state.presence, unavailable=state.unavailable,
            budgets=self.budgets, new_id=self.new_id, runs=runs, exposure=exposure,
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
        from spotfleet.policies.explain import explain_job

        snapshot, _ = self.snapshot()
        if job_id not in snapshot.jobs:
            snapshot.jobs[job_id] = self.store.get_job(job_id)  # finished jobs too; NotFound if unknown
        return explain_job(snapshot, job_id).to_dict()

    # ------------------------------------------------------------ agents

    def _instance_for(self, token: str) -> Instance:
        inst = self.store.instance_for_token(token)
        if inst is None or not inst.live:
            raise Unauthorized("unknown or retired agent token")
        return inst

    def register_agent(self, token: str, request: RegisterRequest) -> HeartbeatResponse:
        inst = self._instance_for(token)
        now = self.clock.now()
        info = request.model_dump(mode="json")
        self.store.record_presence(inst.id, provider_id=request.provider_id or inst.provider_id, at=now, info=info)
        self.wake()
        return self.desired_state(inst)

    def heartbeat(self, token: str, beat: Heartbeat) -> HeartbeatResponse:
        inst = self._instance_for(token)
        now = self.clock.now()
        self.store.record_presence(inst.id, provider_id=inst.provider_id, at=now,
                                   info={"telemetry": beat.telemetry} if beat.telemetry else {})  # fmt: skip
        self.usage.observe(inst.id, beat, now=now)
        reports = [
            NodeReport(
                job_id=j.job_id, attempt=j.attempt, node_rank=j.node_rank, instance_id=inst.id, status=j.status,
                exit_code=j.exit_code, progress=j.progress, reported_at=now,
                checkpoint=Checkpoint(j.checkpoint.path, j.checkpoint.step, j.checkpoint.at, j.attempt)
                if j.checkpoint else None,
            )
            for j in beat.jobs
        ]  # fmt: skip
        if reports:
            self.store.record_reports(reports)
        if beat.notices and inst.provider_id:
            self.store.add_notices([
                InstanceEvent(provider=inst.provider, provider_instance_id=inst.provider_id, kind=NoticeKind(n.kind),
                              observed_at=n.observed_at, deadline=n.deadline, source=n.source)
                for n in beat.notices
            ])  # fmt: skip
        placed = self._placed_on(inst)
        if beat.notices or _news(beat, placed):
            self.wake()
        return self.desired_state(inst, placed)

    def append_log(self, token: str, chunk: LogChunk) -> int:
        """Append a chunk of a job's log; returns the new size (the agent's next offset)."""
        inst = self._instance_for(token)
        path = self.log_path(chunk.job_id, chunk.attempt, chunk.node_rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self.store.attempt_ran_on(chunk.job_id, chunk.attempt, inst.id):
            raise Unauthorized(f"{chunk.job_id} attempt {chunk.attempt} is not assigned to this instance")
        size = path.stat().st_size if path.exists() else 0
        if chunk.offset != size:
            return size  # out of order or repeated: tell the agent where we are
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(chunk.data)
        return size + len(chunk.data.encode("utf-8"))

    def log_path(self, job_id: str, attempt: int, node_rank: int = 0) -> Path:
        suffix = f"-node{node_rank}" if node_rank else ""
        return self.data_dir / "logs" / job_id / f"attempt-{attempt}{suffix}.log"

    def logs(self, job_id: str, *, attempt: int | None = None) -> str:
        job = self.store.get_job(job_id)
        attempts = [attempt] if attempt is not None else list(range(1, job.attempt + 1))
        parts = []
        for n in attempts:
            path = self.log_path(job_id, n)
            if path.exists():
                if len(attempts) > 1:
                    parts.append(f"===== attempt {n} =====\n")
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
        return "".join(parts)

    def _placed_on(self, inst: Instance) -> list[tuple[Job, int]]:
        """(job, node rank) of every job attempt currently bound to ``inst``."""
        open_attempts = self.store.open_attempts_on(inst.id)
        jobs = self.store.get_jobs(j for j, _, _ in open_attempts)
        placed = []
        for job_id, attempt, rank in open_attempts:
            job = jobs.get(job_id)
            if job is not None and job.attempt == attempt and not job.terminal:
                placed.append((job, rank))
        return placed

    def desired_state(self, inst: Instance, placed: list[tuple[Job, int]] | None = None) -> HeartbeatResponse:
        """Every job attempt that should run on ``inst`` right now."""
        assignments = [
            self._assignment(job, rank, inst) for job, rank in (self._placed_on(inst) if placed is None else placed)
        ]
        return HeartbeatResponse(
            instance_id=inst.id,
            heartbeat_seconds=self.heartbeat_seconds,
            assignments=assignments,
            terminate=inst.state in (InstanceState.TERMINATING, InstanceState.TERMINATED),
        )

    def _assignment(self, job: Job, rank: int, instance: Instance) -> Assignment:
        spec = job.spec
        binding = next(b for b in job.bindings if b.node_rank == rank)
        drain = None
        if job.state is JobState.DRAINING and job.drain_deadline is not None:
            drain = DrainOrder(deadline=job.drain_deadline, reason=job.message)
        env = dict(spec.env)
        env.update({"SPOTFLEET_NODE_RANK": str(rank), "SPOTFLEET_NUM_NODES": str(spec.resources.nodes)})
        return Assignment(
            job_id=job.id, attempt=job.attempt, node_rank=rank, num_nodes=spec.resources.nodes, name=spec.name,
            command=spec.command, env=env, workdir=spec.workdir, gpu_indices=list(binding.gpu_indices),
            checkpoint_dir=os.path.join(self.checkpoint_root, job.id), resume=job.checkpoint is not None,
            checkpoint_signal=spec.checkpoint.signal,
            checkpoint_interval_seconds=spec.checkpoint.interval.total_seconds() if spec.checkpoint.interval else None,
            grace_seconds=spec.checkpoint.grace.total_seconds(), drain=drain,
            checkpoint_now=instance.notice_kind == NoticeKind.REBALANCE.value and spec.is_interruptible,
            peers=[b.instance_id for b in sorted(job.bindings, key=lambda b: b.node_rank)],
        )  # fmt: skip

    def get_job(self, job_id: str) -> Job:
        return self.store.get_job(job_id)


def _news(beat: Heartbeat, placed: list[tuple[Job, int]]) -> bool:
    """Does this heartbeat change what the controller knows (a bound job started,
    a placed job exited)? Only then is a reconcile step worth waking for: a steady
    heartbeat from a busy fleet must not keep the step running back to back."""
    state = {(job.id, job.attempt): job.state for job, _ in placed}
    for j in beat.jobs:
        known = state.get((j.job_id, j.attempt))
        if known is None:
            continue
        if j.status == "exited" or (j.status in ("started", "running") and known is JobState.BOUND):
            return True
    return False
