"""Play every node agent of a harness fleet, tick by tick, through the
controller's real agent entry points (``register_agent``, ``heartbeat``).

A small, deterministic agent model for workload-level tests (the invariant
suite, the fault run): an assigned job starts at once, runs ``work`` seconds
of virtual time, then exits with its scripted code; asked to drain it saves a
checkpoint and exits 85 on the next beat. Instances the cloud no longer runs
stop beating (their agent is gone with them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from spotfleet.controller.agents import Unauthorized
from spotfleet.controller.controller import Controller
from spotfleet.errors import ProviderError
from spotfleet.model import InstanceState
from spotfleet.providers.base import CloudState, LaunchRequest, ProviderInstance
from spotfleet.providers.fake import FakeProvider
from spotfleet.store import Store
from spotfleet.wire import CheckpointInfo, Heartbeat, JobStatus, RegisterRequest

CHECKPOINTED = 85


@dataclass
class Script:
    """What one job does on every run: work this long, then exit with the next code."""

    work_s: float = 60.0
    exit_codes: list[int] = field(default_factory=list)  # per run; 0 once exhausted
    checkpoint_s: float = 0.0  # asked to drain, it exits 85 this long after
    node_error: str | None = None  # reported with a failing exit (a CUDA error line in its output)


@dataclass
class Run:
    started: datetime
    done_before: float  # work saved by earlier runs (checkpoints)
    drain_at: datetime | None = None


@dataclass
class AgentDriver:
    controller: Controller
    provider: FakeProvider
    store: Store
    token: Callable[[str], str]
    scripts: dict[str, Script] = field(default_factory=dict)
    saved: dict[str, float] = field(default_factory=dict)  # job → seconds of checkpointed work
    runs: dict[tuple[str, int, int], Run] = field(default_factory=dict)
    finished: dict[tuple[str, int, int], int] = field(default_factory=dict)  # reported exits
    registered: set[str] = field(default_factory=set)
    beat_every_s: float = 0.0  # with nothing new to say, an agent beats at most this often (0: every tick)
    last_beat: dict[str, datetime] = field(default_factory=dict)
    placements: list[tuple[str, int, str, datetime]] = field(default_factory=list)  # (job, attempt, instance, at)
    starts: dict[str, int] = field(default_factory=dict)  # job → runs started (attempts that ran)
    run_numbers: dict[tuple[str, int], int] = field(default_factory=dict)  # (job, attempt) → SPOTFLEET_ATTEMPT

    def tick(self, now: datetime) -> None:
        """One round of every live agent: register new ones, heartbeat the rest."""
        cloud = {i.provider_id: i for i in self.provider.instances.values()}
        for inst in self.store.list_instances(live_only=True):
            pi = cloud.get(inst.provider_id or "")
            if pi is None or pi.state is CloudState.TERMINATED or inst.state is InstanceState.REQUESTED:
                continue
            tok = self.token(inst.id)
            try:
                if inst.id not in self.registered:
                    answer = self.controller.agents.register(tok, RegisterRequest(provider_id=inst.provider_id))
                    self.registered.add(inst.id)
                else:
                    statuses = self._statuses(inst.id, now)
                    quiet = all(s.status == "running" for s in statuses) and inst.state is not InstanceState.DRAINING
                    last = self.last_beat.get(inst.id)
                    if quiet and last is not None and (now - last).total_seconds() < self.beat_every_s:
                        continue
                    answer = self.controller.agents.heartbeat(tok, Heartbeat(jobs=statuses))
                self.last_beat[inst.id] = now
            except Unauthorized:
                continue
            self._apply(inst.id, answer.assignments, now)

    def _apply(self, instance_id: str, assignments: list, now: datetime) -> None:  # type: ignore[type-arg]
        for a in assignments:
            key = (a.job_id, a.attempt, a.node_rank)
            if key in self.finished:
                continue
            run = self.runs.get(key)
            if run is None:
                self.runs[key] = run = Run(now, self.saved.get(a.job_id, 0.0))
                self.placements.append((a.job_id, a.attempt, instance_id, now))
                self.starts[a.job_id] = self.starts.get(a.job_id, 0) + 1
                self.run_numbers[(a.job_id, a.attempt)] = a.run or a.attempt
                self._where[key] = instance_id
            if a.drain is not None and run.drain_at is None:
                run.drain_at = now

    def __post_init__(self) -> None:
        self._where: dict[tuple[str, int, int], str] = {}

    def _statuses(self, instance_id: str, now: datetime) -> list[JobStatus]:
        out: list[JobStatus] = []
        for key, run in list(self.runs.items()):
            if self._where.get(key) != instance_id or key in self.finished:
                continue
            job_id, attempt, rank = key
            script = self.scripts.setdefault(job_id, Script())
            done = run.done_before + (now - run.started).total_seconds()
            if run.drain_at is not None and (now - run.drain_at).total_seconds() >= script.checkpoint_s:
                self.saved[job_id] = max(self.saved.get(job_id, 0.0), done) if rank == 0 else self.saved.get(job_id, 0)
                out.append(JobStatus(job_id=job_id, attempt=attempt, node_rank=rank, status="exited",
                                     exit_code=CHECKPOINTED,
                                     checkpoint=CheckpointInfo(path=f"/ckpt/{job_id}", step=int(done), at=now)))  # fmt: skip
                self.finished[key] = CHECKPOINTED
            elif done >= script.work_s:
                n = self.starts.get(job_id, 1) - 1
                code = script.exit_codes[n] if n < len(script.exit_codes) else 0
                out.append(JobStatus(job_id=job_id, attempt=attempt, node_rank=rank, status="exited", exit_code=code,
                                     node_error=script.node_error if code else None))  # fmt: skip
                self.finished[key] = code
            else:
                out.append(JobStatus(job_id=job_id, attempt=attempt, node_rank=rank, status="running"))
        return out


@dataclass
class LaggingProvider(FakeProvider):
    """The fake provider with two real-cloud habits: it can accept a launch and
    lose the answer (``lose_answers``), and its listing lags a new instance by
    ``list_lag_s`` seconds (eventual consistency)."""

    lose_answers: int = 0
    list_lag_s: float = 0.0

    def launch(self, request: LaunchRequest) -> list[ProviderInstance]:
        made = super().launch(request)
        if self.lose_answers > 0:
            self.lose_answers -= 1
            raise ProviderError("timed out waiting for the answer (the launch went through)")
        return made

    def list_instances(self) -> list[ProviderInstance]:
        now = self.clock.now()
        return [i for i in super().list_instances()
                if i.launched_at is None or (now - i.launched_at).total_seconds() >= self.list_lag_s]  # fmt: skip
