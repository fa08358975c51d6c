"""The store: one class, one transaction per call, domain objects in and out.

Design choice: the reconcile step is the only writer of lifecycle columns and it
writes a whole step's decisions in one transaction (``commit``), *before* it
calls any cloud: a launch is recorded as a REQUESTED instance with its request id
first, so a crash between "decided" and "done" converges on restart. The API
writes only submissions, cancel requests and the agent inbox tables.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any

from sqlalchemy import Engine, create_engine, event, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from spotfleet.errors import NotFound
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import TERMINAL_INSTANCE_STATES, Instance
from spotfleet.model.job import TERMINAL_JOB_STATES, Checkpoint, Job, JobState
from spotfleet.model.snapshot import AgentPresence, NodeReport, PoolExposure, RunRecord
from spotfleet.store import convert
from spotfleet.store.schema import (
    AgentPresenceRow,
    BillingSegmentRow,
    EventRow,
    InstanceRow,
    JobAttemptRow,
    JobRow,
    NodeReportRow,
    NoticeRow,
    UnavailableOfferingRow,
)


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and use the psycopg 3 driver."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class AttemptStart:
    job_id: str
    attempt: int
    node_rank: int
    instance_id: str
    gpus: int
    mig_slices: int
    at: datetime
    gpu_share: float = 0.0  # GPUs' worth: whole GPUs, MIG slices/7 or the fraction


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    job_id: str
    attempt: int
    outcome: str  # succeeded | failed | checkpointed | interrupted | lost | cancelled | unbound
    at: datetime


@dataclass(frozen=True, slots=True)
class AttemptRunning:
    job_id: str
    attempt: int
    at: datetime


@dataclass(frozen=True, slots=True)
class EventRecord:
    at: datetime
    kind: str
    message: str
    level: str = "info"
    job_id: str | None = None
    instance_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PendingNotice:
    id: int
    event: InstanceEvent


@dataclass(slots=True)
class Changes:
    """Everything one reconcile step decided, written in one transaction."""

    jobs: list[Job] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    new_instances: list[tuple[Instance, str]] = field(default_factory=list)  # (instance, agent token)
    attempts_started: list[AttemptStart] = field(default_factory=list)
    attempts_running: list[AttemptRunning] = field(default_factory=list)
    attempts_ended: list[AttemptEnd] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    notices_processed: list[int] = field(default_factory=list)
    unavailable: dict[str, tuple[datetime, str]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (
            self.jobs or self.instances or self.new_instances or self.attempts_started
            or self.attempts_running or self.attempts_ended or self.events
            or self.notices_processed or self.unavailable
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class State:
    """What the reconcile step reads at the start of a step."""

    jobs: dict[str, Job]
    instances: dict[str, Instance]
    reports: dict[tuple[str, int, int], NodeReport]
    presence: dict[str, AgentPresence]
    notices: list[PendingNotice]
    unavailable: dict[str, datetime]


class Store:
    """SQLite by default, PostgreSQL by URL; schema managed by Alembic."""

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = normalize_url(url)
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if self.dialect == "sqlite":
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = create_engine(self.url, **kwargs)
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    # ------------------------------------------------------------ lifecycle

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (idempotent)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(resources.files("spotfleet") / "store" / "migrations"))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def close(self) -> None:
        self.engine.dispose()

    def session(self) -> Session:
        return self._sessions()

    # ------------------------------------------------------------ jobs (API)

    def add_job(self, job: Job) -> None:
        with self._sessions.begin() as s:
            s.add(convert.job_to_row(job))

    def get_job(self, job_id: str) -> Job:
        with self.session() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise NotFound(f"no job with id {job_id!r}")
            return convert.job_from_row(row)

    def list_jobs(
        self, *, states: Iterable[JobState] | None = None, tenant: str | None = None, limit: int | None = None
    ) -> list[Job]:
        query = select(JobRow).order_by(JobRow.created_at, JobRow.id)
        if states is not None:
            query = query.where(JobRow.state.in_([s.value for s in states]))
        if tenant is not None:
            query = query.where(JobRow.tenant == tenant)
        if limit is not None:
            query = query.limit(limit)
        with self.session() as s:
            return [convert.job_from_row(r) for r in s.scalars(query)]

    def request_cancel(self, job_id: str) -> Job:
        """Flag a job for cancellation; the reconcile step carries it out."""
        with self._sessions.begin() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise NotFound(f"no job with id {job_id!r}")
            if JobState(row.state) not in TERMINAL_JOB_STATES:
                row.cancel_requested = True
            return convert.job_from_row(row)

    def job_attempts(self, job_id: str) -> list[dict[str, Any]]:
        query = (
            select(JobAttemptRow)
            .where(JobAttemptRow.job_id == job_id)
            .order_by(JobAttemptRow.attempt, JobAttemptRow.node_rank)
        )
        with self.session() as s:
            return [
                {
                    "attempt": r.attempt,
                    "node_rank": r.node_rank,
                    "instance_id": r.instance_id,
                    "gpus": r.gpus,
                    "mig_slices": r.mig_slices,
                    "gpu_share": r.gpu_share,
                    "bound_at": r.bound_at,
                    "started_at": r.started_at,
                    "ended_at": r.ended_at,
                    "outcome": r.outcome,
                }
                for r in s.scalars(query)
            ]

    # ------------------------------------------------------------ instances

    def list_instances(self, *, live_only: bool = False) -> list[Instance]:
        query = select(InstanceRow).order_by(InstanceRow.created_at, InstanceRow.id)
        if live_only:
            query = query.where(InstanceRow.state.not_in([s.value for s in TERMINAL_INSTANCE_STATES]))
        with self.session() as s:
            return [convert.instance_from_row(r) for r in s.scalars(query)]

    def get_instance(self, instance_id: str) -> Instance:
        with self.session() as s:
            row = s.get(InstanceRow, instance_id)
            if row is None:
                raise NotFound(f"no instance with id {instance_id!r}")
            return convert.instance_from_row(row)

    def instance_for_token(self, token: str) -> Instance | None:
        with self.session() as s:
            row = s.scalars(select(InstanceRow).where(InstanceRow.agent_token_hash == hash_token(token))).first()
            return convert.instance_from_row(row) if row is not None else None

    def rotate_agent_token(self, instance_id: str, token: str) -> None:
        """Replace an instance's agent secret (only its hash is ever stored)."""
        with self._sessions.begin() as s:
            s.execute(
                update(InstanceRow).where(InstanceRow.id == instance_id).values(agent_token_hash=hash_token(token))
            )

    def open_attempts_on(self, instance_id: str) -> list[tuple[str, int, int]]:
        """(job id, attempt, node rank) of every attempt bound to an instance and not ended."""
        query = select(JobAttemptRow.job_id, JobAttemptRow.attempt, JobAttemptRow.node_rank).where(
            JobAttemptRow.instance_id == instance_id, JobAttemptRow.ended_at.is_(None)
        )
        with self.session() as s:
            return [(r[0], r[1], r[2]) for r in s.execute(query)]

    def attempt_ran_on(self, job_id: str, attempt: int, instance_id: str) -> bool:
        query = select(JobAttemptRow.id).where(
            JobAttemptRow.job_id == job_id, JobAttemptRow.attempt == attempt, JobAttemptRow.instance_id == instance_id
        )
        with self.session() as s:
            return s.scalars(query).first() is not None

    def get_jobs(self, job_ids: Iterable[str]) -> dict[str, Job]:
        ids = list(set(job_ids))
        if not ids:
            return {}
        with self.session() as s:
            return {r.id: convert.job_from_row(r) for r in s.scalars(select(JobRow).where(JobRow.id.in_(ids)))}

    def run_history(self, *, limit: int = 5000) -> list[RunRecord]:
        """Finished attempts (newest first) as forecast inputs: family, GPU, duration."""
        query = (
            select(JobAttemptRow, JobRow.family, InstanceRow.offering)
            .join(JobRow, JobRow.id == JobAttemptRow.job_id)
            .join(InstanceRow, InstanceRow.id == JobAttemptRow.instance_id)
            .where(
                JobAttemptRow.ended_at.is_not(None), JobAttemptRow.started_at.is_not(None), JobAttemptRow.node_rank == 0
            )
            .order_by(JobAttemptRow.id.desc())
            .limit(limit)
        )
        out = []
        with self.session() as s:
            for attempt, family, offering in s.execute(query):
                assert attempt.ended_at is not None and attempt.started_at is not None
                out.append(RunRecord(
                    family=family, gpu=str(offering.get("gpu", "")), gpus=max(attempt.gpus, 1),
                    duration_s=(attempt.ended_at - attempt.started_at).total_seconds(),
                    succeeded=attempt.outcome == "succeeded",
                ))  # fmt: skip
        return out

    def pool_exposure(self, *, now: datetime) -> list[PoolExposure]:
        """Spot instance-hours and reclaims per pool: the hazard estimate's evidence."""
        hours: dict[str, float] = {}
        reclaims: dict[str, int] = {}
        query = select(InstanceRow).where(InstanceRow.market == "spot", InstanceRow.launched_at.is_not(None))
        with self.session() as s:
            for row in s.scalars(query):
                key = f"{row.provider}:spot:{row.instance_type}:{row.zone}"
                assert row.launched_at is not None
                end = row.terminated_at or now
                hours[key] = hours.get(key, 0.0) + max(0.0, (end - row.launched_at).total_seconds() / 3600)
                if row.notice_kind == NoticeKind.SPOT_INTERRUPTION.value:
                    reclaims[key] = reclaims.get(key, 0) + 1
        return [PoolExposure(pool=k, hours=h, interruptions=reclaims.get(k, 0)) for k, h in sorted(hours.items())]

    def billing_segments(self, *, instance_id: str | None = None) -> list[BillingSegmentRow]:
        query = select(BillingSegmentRow).order_by(BillingSegmentRow.start, BillingSegmentRow.id)
        if instance_id is not None:
            query = query.where(BillingSegmentRow.instance_id == instance_id)
        with self.session() as s:
            return list(s.scalars(query))

    # ------------------------------------------------------------ agent inbox

    def record_presence(self, instance_id: str, *, provider_id: str | None, at: datetime, info: dict[str, Any]) -> None:
        with self._sessions.begin() as s:
            row = s.get(AgentPresenceRow, instance_id)
            if row is None:
                s.add(
                    AgentPresenceRow(
                        instance_id=instance_id, provider_id=provider_id, registered_at=at, last_seen=at, info=info
                    )
                )
            else:
                row.last_seen = at
                row.provider_id = provider_id or row.provider_id
                if info:
                    row.info = info

    def record_reports(self, reports: Sequence[NodeReport]) -> None:
        with self._sessions.begin() as s:
            for r in reports:
                row = s.get(NodeReportRow, (r.job_id, r.attempt, r.node_rank))
                values = {
                    "instance_id": r.instance_id, "status": r.status, "exit_code": r.exit_code,
                    "checkpoint": r.checkpoint.to_dict() if r.checkpoint else None,
                    "progress": dict(r.progress), "reported_at": r.reported_at,
                }  # fmt: skip
                if row is None:
                    s.add(NodeReportRow(job_id=r.job_id, attempt=r.attempt, node_rank=r.node_rank, **values))
                else:
                    for key, value in values.items():
                        setattr(row, key, value)

    def add_notices(self, events: Sequence[InstanceEvent]) -> None:
        if not events:
            return
        with self._sessions.begin() as s:
            for e in events:
                s.add(NoticeRow(
                    provider=e.provider, provider_instance_id=e.provider_instance_id, kind=e.kind.value,
                    observed_at=e.observed_at, deadline=e.deadline, source=e.source, detail=e.detail,
                ))  # fmt: skip

    # ------------------------------------------------------------ reconciler

    def load_state(self, *, recent_terminal: int = 0) -> State:
        """Non-terminal jobs and live instances, with the inbox."""
        with self.session() as s:
            job_rows = s.scalars(select(JobRow).where(JobRow.state.not_in([x.value for x in TERMINAL_JOB_STATES])))
            jobs = {r.id: convert.job_from_row(r) for r in job_rows}
            inst_rows = s.scalars(
                select(InstanceRow).where(InstanceRow.state.not_in([x.value for x in TERMINAL_INSTANCE_STATES]))
            )
            instances = {r.id: convert.instance_from_row(r) for r in inst_rows}
            reports: dict[tuple[str, int, int], NodeReport] = {}
            if jobs:
                for r in s.scalars(select(NodeReportRow).where(NodeReportRow.job_id.in_(list(jobs)))):
                    job = jobs.get(r.job_id)
                    if job is None or r.attempt != job.attempt:
                        continue
                    reports[(r.job_id, r.attempt, r.node_rank)] = NodeReport(
                        job_id=r.job_id, attempt=r.attempt, node_rank=r.node_rank, instance_id=r.instance_id,
                        status=r.status, exit_code=r.exit_code,
                        checkpoint=Checkpoint.from_dict(r.checkpoint) if r.checkpoint else None,
                        progress=r.progress or {}, reported_at=r.reported_at,
                    )  # fmt: skip
            presence = {
                r.instance_id: AgentPresence(r.instance_id, r.registered_at, r.last_seen)
                for r in s.scalars(select(AgentPresenceRow).where(AgentPresenceRow.instance_id.in_(list(instances))))
            } if instances else {}  # fmt: skip
            notices = [
                PendingNotice(r.id, InstanceEvent(
                    provider=r.provider, provider_instance_id=r.provider_instance_id, kind=NoticeKind(r.kind),
                    observed_at=r.observed_at, deadline=r.deadline, source=r.source, detail=r.detail,
                ))
                for r in s.scalars(select(NoticeRow).where(NoticeRow.processed_at.is_(None)).order_by(NoticeRow.id))
            ]  # fmt: skip
            unavailable = {r.key: r.until for r in s.scalars(select(UnavailableOfferingRow))}
            return State(jobs, instances, reports, presence, notices, unavailable)

    def commit(self, changes: Changes, *, now: datetime) -> None:
        """Write one step's decisions atomically (billing segments follow instances)."""
        if changes.empty():
            return
        with self._sessions.begin() as s:
            for inst, token in changes.new_instances:
                s.add(convert.instance_to_row(inst, agent_token_hash=hash_token(token)))
            s.flush()
            for job in changes.jobs:
                s.execute(update(JobRow).where(JobRow.id == job.id).values(**convert.job_lifecycle_values(job)))
            for inst in changes.instances:
                s.execute(
                    update(InstanceRow)
                    .where(InstanceRow.id == inst.id)
                    .values(**convert.instance_lifecycle_values(inst))
                )
            for inst in [*changes.instances, *(i for i, _ in changes.new_instances)]:
                _sync_billing(s, inst, now)
            for a in changes.attempts_started:
                s.add(JobAttemptRow(
                    job_id=a.job_id, attempt=a.attempt, node_rank=a.node_rank, instance_id=a.instance_id,
                    gpus=a.gpus, mig_slices=a.mig_slices, gpu_share=a.gpu_share or float(a.gpus), bound_at=a.at,
                ))  # fmt: skip
            for r in changes.attempts_running:
                s.execute(
                    update(JobAttemptRow)
                    .where(
                        JobAttemptRow.job_id == r.job_id,
                        JobAttemptRow.attempt == r.attempt,
                        JobAttemptRow.started_at.is_(None),
                    )
                    .values(started_at=r.at)
                )
            for e in changes.attempts_ended:
                s.execute(
                    update(JobAttemptRow)
                    .where(
                        JobAttemptRow.job_id == e.job_id,
                        JobAttemptRow.attempt == e.attempt,
                        JobAttemptRow.ended_at.is_(None),
                    )
                    .values(ended_at=e.at, outcome=e.outcome)
                )
            for ev in changes.events:
                s.add(EventRow(at=ev.at, level=ev.level, kind=ev.kind, job_id=ev.job_id, instance_id=ev.instance_id,
                               message=ev.message, data=ev.data))  # fmt: skip
            if changes.notices_processed:
                s.execute(update(NoticeRow).where(NoticeRow.id.in_(changes.notices_processed)).values(processed_at=now))
            for key, (until, reason) in changes.unavailable.items():
                row = s.get(UnavailableOfferingRow, key)
                if row is None:
                    s.add(UnavailableOfferingRow(key=key, until=until, reason=reason))
                else:
                    row.until, row.reason = until, reason

    def add_event(self, record: EventRecord) -> None:
        self.commit(Changes(events=[record]), now=record.at)

    def events(
        self, *, limit: int = 50, job_id: str | None = None, instance_id: str | None = None
    ) -> list[EventRecord]:
        query = select(EventRow).order_by(EventRow.id.desc()).limit(limit)
        if job_id is not None:
            query = query.where(EventRow.job_id == job_id)
        if instance_id is not None:
            query = query.where(EventRow.instance_id == instance_id)
        with self.session() as s:
            rows = list(s.scalars(query))
        return [
            EventRecord(at=r.at, kind=r.kind, message=r.message, level=r.level, job_id=r.job_id,
                        instance_id=r.instance_id, data=r.data or {})
            for r in reversed(rows)
        ]  # fmt: skip


def _sync_billing(s: Session, inst: Instance, now: datetime) -> None:
    """Keep billing segments in step with the instance: one open segment while it
    is paid for, closed when it terminates, split when its price changes. An
    instance launched and gone within one step still gets its (closed) segment."""
    if inst.launched_at is None:
        return  # never accepted by the cloud: nothing was paid
    segments = list(s.scalars(select(BillingSegmentRow).where(BillingSegmentRow.instance_id == inst.id)))
    open_seg = next((seg for seg in segments if seg.end is None), None)
    ended = inst.state in TERMINAL_INSTANCE_STATES
    end = max(inst.terminated_at or now, inst.launched_at) if ended else None
    if open_seg is not None:
        if ended:
            open_seg.end = max(end or now, open_seg.start)
            return
        if abs(open_seg.price_per_hour - inst.offering.price_per_hour) <= 1e-12:
            return
        open_seg.end = now  # the price changed: close at the old price, open at the new
    elif ended and segments:
        return  # already closed
    o = inst.offering
    s.add(BillingSegmentRow(
        instance_id=inst.id, provider=o.provider, region=o.region, zone=o.zone, instance_type=o.instance_type,
        market=o.market.value, gpu_count=o.gpu_count, price_per_hour=o.price_per_hour,
        on_demand_price_per_hour=o.on_demand_price_per_hour, start=now if segments else inst.launched_at, end=end,
    ))  # fmt: skip


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
