"""The store: one class, one transaction per call, domain objects in and out.

Design choice: the reconcile step is the only writer of lifecycle columns and it
writes a whole step's decisions in one transaction (``commit``), *before* it
calls any cloud: a launch is recorded as a REQUESTED instance with its request id
first, so a crash between "decided" and "done" converges on restart. The API
writes only submissions, cancel requests and the agent inbox tables.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from importlib import resources
from typing import Any, Protocol

from sqlalchemy import Engine, Text, cast, create_engine, event, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, defer, sessionmaker

from spotfleet.errors import NotFound
from spotfleet.ledger.types import AttemptRecord, AttemptUsage, SegmentRecord, UsageCounters
from spotfleet.model.changes import (  # noqa: F401  (re-exported: the store's records)
    AgentView,
    AttemptEnd,
    AttemptRunning,
    AttemptStart,
    Changes,
    EventRecord,
    FleetHold,
    HeartbeatRecord,
    PendingNotice,
)
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import TERMINAL_INSTANCE_STATES, Instance
from spotfleet.model.job import NODE_FAILED, TERMINAL_JOB_STATES, Checkpoint, Job, JobState
from spotfleet.model.partition import mig_unfit_of
from spotfleet.model.snapshot import AgentPresence, NodeReport, PoolExposure, RunRecord
from spotfleet.model.spec import JobSpec
from spotfleet.store import convert
from spotfleet.store.schema import (
    AgentPresenceRow,
    ApiTokenRow,
    AttemptUsageRow,
    BillingSegmentRow,
    EventRow,
    FleetHoldRow,
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


def _redact(url: str) -> str:
    """The URL with its password masked (``spotfleet.redact``)."""
    from spotfleet.redact import redact

    return redact(url)


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A scoped API token as stored (never the token itself)."""

    id: str
    name: str
    kind: str  # admin | tenant | viewer
    tenant: str | None
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "kind": self.kind, "tenant": self.tenant,
                "scopes": list(self.scopes), "created_at": self.created_at.isoformat(),
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None}  # fmt: skip


def _token_record(row: ApiTokenRow) -> TokenRecord:
    return TokenRecord(id=row.id, name=row.name, kind=row.kind, tenant=row.tenant,
                       scopes=tuple(x for x in row.scopes.split(",") if x), created_at=row.created_at,
                       revoked_at=row.revoked_at)  # fmt: skip


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


NODE_ERROR_KEY = "_node_error"  # a report's node_error travels in its progress JSON (no column needed)


@dataclass(frozen=True, slots=True)
class FleetCounts:
    """The fleet in numbers, for ``/metrics``."""

    instances: list[tuple[str, str, str, str, float, bool]]  # provider, market, type, state, $/h, launched
    jobs: list[tuple[str, str, int]]  # state, priority, count
    interruptions: int
    notices: dict[str, int]  # by kind
    events: dict[str, int]  # drains and idle alerts, by kind
    presence: list[tuple[str, dict[str, Any]]]  # instance id, the agent's last info (telemetry)


@dataclass(frozen=True, slots=True)
class State:
    """What the reconcile step reads at the start of a step."""

    jobs: dict[str, Job]
    instances: dict[str, Instance]
    reports: dict[tuple[str, int, int], NodeReport]
    presence: dict[str, AgentPresence]
    notices: list[PendingNotice]
    unavailable: dict[str, datetime]


class Fence(Protocol):
    """Checks, inside a write transaction, that this writer may still write
    (``spotfleet.store.election.Elector``); raises ``Fenced`` otherwise."""

    def check(self, session: Session) -> None: ...


class Store:
    """SQLite by default, PostgreSQL by URL; schema managed by Alembic."""

    def __init__(self, url: str, *, echo: bool = False, idle_in_transaction: timedelta | None = None) -> None:
        """``idle_in_transaction`` (PostgreSQL): the server ends a transaction whose
        client has sent nothing for that long. A replica frozen (SIGSTOP, a GC or VM
        pause) inside a step's transaction holds the lease row ``FOR SHARE``, and a
        successor's take-over waits for it: without this limit, for as long as the
        freeze lasts. The service sets it to the lease TTL."""
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        from spotfleet.errors import InvalidSpec
        from spotfleet.extras import requires

        self.url = normalize_url(url)
        try:
            parsed = make_url(self.url)
        except ArgumentError:
            raise InvalidSpec("database", f"cannot read the URL {_redact(url)!r}: write sqlite:///PATH or "
                              "postgresql://USER@HOST/DB (config `database`, --db or SPOTFLEET_DATABASE)") from None  # fmt: skip
        self.dialect = parsed.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise InvalidSpec("database", f"unsupported database {parsed.drivername!r} in {_redact(url)!r}: "
                              "spotfleet stores in sqlite:///PATH or postgresql://USER@HOST/DB")  # fmt: skip
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if self.dialect == "sqlite":
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        elif idle_in_transaction is not None:
            ms = max(1, int(idle_in_transaction.total_seconds() * 1000))
            kwargs["connect_args"] = {"options": f"-c idle_in_transaction_session_timeout={ms}"}
        try:
            with requires("postgres", "a PostgreSQL database"):
                self.engine: Engine = create_engine(self.url, **kwargs)
        except NoSuchModuleError:
            raise InvalidSpec("database", f"unknown database kind {parsed.drivername!r} in {_redact(url)!r}: "
                              "spotfleet stores in sqlite:/// or postgresql://") from None  # fmt: skip
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            ping_when_idle(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Called with the events of every successful commit (the decision log of `spotfleet up`).
        self.event_listeners: list[Callable[[Sequence[EventRecord]], None]] = []
        self._fence = threading.local()  # the reconcile step's thread writes fenced (see ``fenced``)
        # Parsed specs of the live jobs, by job id (see ``load_state``).
        self._specs: dict[str, JobSpec] = {}
        # The live jobs and instances as last converted, by id, with the key that
        # says whether the row changed since (see ``load_state``); never mutated.
        self._job_rows: dict[str, tuple[tuple[Any, ...], Job]] = {}
        self._instance_rows: dict[str, tuple[tuple[Any, ...], Instance]] = {}

    # ------------------------------------------------------------ lifecycle

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (idempotent)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(resources.files("spotfleet") / "store" / "migrations"))
        with self.reachable(), self.engine.begin() as conn:
            if self.dialect == "postgresql":  # replicas starting together migrate one at a time
                from sqlalchemy import text

                conn.execute(text("SELECT pg_advisory_xact_lock(7458031501)"))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    @contextmanager
    def reachable(self) -> Iterator[None]:
        """Turn "cannot connect" into one line naming the database (password hidden)."""
        from sqlalchemy.exc import OperationalError

        from spotfleet.errors import StoreUnavailable

        try:
            yield
        except OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc).splitlines()[0]
            reason = _redact(reason)
            raise StoreUnavailable(
                f"cannot use the database {_redact(self.url)}: {reason} — is it running and reachable? "
                "(config `database`, --db or SPOTFLEET_DATABASE)"
            ) from None

    @property
    def safe_url(self) -> str:
        """The URL to show anyone: password masked."""
        return _redact(self.url)

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> None:
        """Raise unless the database answers a trivial query (``/readyz``)."""
        from sqlalchemy import text

        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def session(self) -> Session:
        return self._sessions()

    @contextmanager
    def fenced(self, fence: Fence | None) -> Iterator[None]:
        """Every write this thread makes inside the block first runs ``fence.check``
        in the same transaction: the reconcile step of a replicated controller
        writes only while its leader epoch holds. Other threads (the API's inbox
        writes) are not fenced."""
        previous = getattr(self._fence, "value", None)
        self._fence.value = fence
        try:
            yield
        finally:
            self._fence.value = previous

    @contextmanager
    def _begin(self) -> Iterator[Session]:
        with self._sessions.begin() as s:
            fence: Fence | None = getattr(self._fence, "value", None)
            if fence is not None:
                fence.check(s)
            yield s

    # ------------------------------------------------------------ jobs (API)

    def add_job(self, job: Job) -> None:
        with self._begin() as s:
            s.add(convert.job_to_row(job))

    def get_job(self, job_id: str) -> Job:
        with self.session() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise NotFound(f"no job with id {job_id!r}")
            return convert.job_from_row(row)

    def add_jobs(self, jobs: Sequence[Job], events: Sequence[EventRecord]) -> None:
        """Many submissions in one transaction (``POST /v1/jobs/batch``)."""
        with self._begin() as s:
            s.add_all([convert.job_to_row(job) for job in jobs])
            s.add_all([EventRow(at=ev.at, level=ev.level, kind=ev.kind, job_id=ev.job_id, instance_id=ev.instance_id,
                                message=ev.message, data=ev.data) for ev in events])  # fmt: skip
        for listener in self.event_listeners:
            listener(events)

    def list_jobs(
        self,
        *,
        states: Iterable[JobState] | None = None,
        tenant: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest: bool = False,
    ) -> list[Job]:
        """Jobs oldest first, filtered and paginated in SQL. ``newest``: the newest
        ``limit`` (after skipping the ``offset`` newest), still returned oldest first."""
        if newest:
            query = select(JobRow).order_by(JobRow.created_at.desc(), JobRow.id.desc())
        else:
            query = select(JobRow).order_by(JobRow.created_at, JobRow.id)
        query = query.options(defer(JobRow.spec, raiseload=True))
        if states is not None:
            query = query.where(JobRow.state.in_([s.value for s in states]))
        if tenant is not None:
            query = query.where(JobRow.tenant == tenant)
        if limit is not None:
            query = query.limit(limit)
        if offset:
            query = query.offset(offset)
        with self.session() as s:
            rows = list(s.scalars(query))
            specs = self._live_specs(s, [r.id for r in rows])
            out = [convert.job_from_row(r, spec=specs[r.id]) for r in rows]
        return out[::-1] if newest else out

    def count_jobs(self, *, states: Iterable[JobState] | None = None, tenant: str | None = None) -> int:
        from sqlalchemy import func

        query = select(func.count()).select_from(JobRow)
        if states is not None:
            query = query.where(JobRow.state.in_([s.value for s in states]))
        if tenant is not None:
            query = query.where(JobRow.tenant == tenant)
        with self.session() as s:
            return int(s.execute(query).scalar_one())

    def request_cancel(self, job_id: str) -> Job:
        """Flag a job for cancellation; the reconcile step carries it out."""
        with self._begin() as s:
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
        with self._begin() as s:
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

    def instances_to_avoid(self, job_ids: Iterable[str]) -> dict[str, frozenset[str]]:
        """Job → instances where one of its attempts failed in a node-looking way
        (``failed:node``) or was lost with its agent/instance (``lost``)."""
        ids = list(set(job_ids))
        if not ids:
            return {}
        query = select(JobAttemptRow.job_id, JobAttemptRow.instance_id).where(
            JobAttemptRow.job_id.in_(ids), JobAttemptRow.outcome.in_([NODE_FAILED, "lost"])
        )
        out: dict[str, set[str]] = {}
        with self.session() as s:
            for job_id, instance_id in s.execute(query):
                out.setdefault(job_id, set()).add(instance_id)
        return {k: frozenset(v) for k, v in out.items()}

    def attempt_ran_on(self, job_id: str, attempt: int, instance_id: str) -> bool:
        query = select(JobAttemptRow.id).where(
            JobAttemptRow.job_id == job_id, JobAttemptRow.attempt == attempt, JobAttemptRow.instance_id == instance_id
        )
        with self.session() as s:
            return s.scalars(query).first() is not None

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
        query = select(InstanceRow.provider, InstanceRow.instance_type, InstanceRow.zone, InstanceRow.launched_at,
                       InstanceRow.terminated_at, InstanceRow.notice_kind).where(
            InstanceRow.market == "spot", InstanceRow.launched_at.is_not(None))  # fmt: skip
        with self.session() as s:
            for row in s.execute(query):
                key = f"{row.provider}:spot:{row.instance_type}:{row.zone}"
                assert row.launched_at is not None
                end = row.terminated_at or now
                hours[key] = hours.get(key, 0.0) + max(0.0, (end - row.launched_at).total_seconds() / 3600)
                if row.notice_kind == NoticeKind.SPOT_INTERRUPTION.value:
                    reclaims[key] = reclaims.get(key, 0) + 1
        return [PoolExposure(pool=k, hours=h, interruptions=reclaims.get(k, 0)) for k, h in sorted(hours.items())]

    def billing_segments(self, *, instance_id: str | None = None) -> list[SegmentRecord]:
        """Paid time per instance and price, oldest first (the ledger's input)."""
        query = _SEGMENTS if instance_id is None else _SEGMENTS.where(BillingSegmentRow.instance_id == instance_id)
        with self.session() as s:
            return _segments(s, query)

    def attempt_records(self) -> list[AttemptRecord]:
        """Every node of every job attempt with its job's tenant, family and name,
        ordered by job, node and attempt (the ledger's input)."""
        with self.session() as s:
            return _attempts(s)

    def attempt_usage(self, job_ids: Iterable[str] | None = None) -> dict[tuple[str, int, int], AttemptUsage]:
        """What each job attempt did with its GPUs (``attempt_usage``), by (job, attempt, rank)."""
        with self.session() as s:
            return _usage(s, job_ids)

    def fleet_counts(self) -> FleetCounts:
        """What ``/metrics`` reports about the fleet, read in one session."""
        live_states = [x.value for x in TERMINAL_INSTANCE_STATES]
        with self.session() as s:
            instances = [
                (r[0], r[1], r[2], r[3], float(r[4]), r[5] is not None)
                for r in s.execute(
                    select(InstanceRow.provider, InstanceRow.market, InstanceRow.instance_type, InstanceRow.state,
                           InstanceRow.price_per_hour, InstanceRow.launched_at)
                    .where(InstanceRow.state.not_in(live_states))
                )
            ]  # fmt: skip
            jobs = [
                (r[0], r[1], int(r[2]))
                for r in s.execute(
                    select(JobRow.state, JobRow.priority, func.count()).group_by(JobRow.state, JobRow.priority)
                )
            ]
            interruptions = int(s.scalar(select(func.coalesce(func.sum(JobRow.interruptions), 0))) or 0)
            notices = {
                r[0]: int(r[1]) for r in s.execute(select(NoticeRow.kind, func.count()).group_by(NoticeRow.kind))
            }
            events = {r[0]: int(r[1]) for r in s.execute(
                select(EventRow.kind, func.count()).where(EventRow.kind.in_(["job.draining", "instance.gpus_idle"]))
                .group_by(EventRow.kind))}  # fmt: skip
            presence = [
                (r[0], r[1] or {}) for r in s.execute(select(AgentPresenceRow.instance_id, AgentPresenceRow.info))
            ]
        return FleetCounts(instances, jobs, interruptions, notices, events, presence)

    def ledger_inputs(
        self,
    ) -> tuple[list[SegmentRecord], list[AttemptRecord], dict[tuple[str, int, int], AttemptUsage]]:
        """Segments, attempts and usage read in one session: one consistent view for the ledger."""
        with self.session() as s:
            return _segments(s, _SEGMENTS), _attempts(s), _usage(s, None)

    # ------------------------------------------------------------ agent inbox

    def agent_exchange(self, token: str, build: Callable[[AgentView], HeartbeatRecord]) -> AgentView | None:
        """One agent heartbeat (or register) in **one** transaction: read what the
        agent's instance holds, let ``build`` (pure; it may raise to refuse) decide
        what to record, write it all. ``None``, writing nothing, for an unknown token."""
        with self._sessions.begin() as s:
            row = s.scalars(select(InstanceRow).where(InstanceRow.agent_token_hash == hash_token(token))).first()
            if row is None:
                return None
            instance = convert.instance_from_row(row)
            attempts = s.execute(
                select(JobAttemptRow.job_id, JobAttemptRow.attempt, JobAttemptRow.node_rank, JobAttemptRow.ended_at)
                .where(JobAttemptRow.instance_id == instance.id)
            ).all()  # fmt: skip
            open_ = [(a[0], a[1], a[2]) for a in attempts if a[3] is None]
            wanted = sorted({a[0] for a in open_})
            rows: list[JobRow] = list(s.scalars(select(JobRow).where(JobRow.id.in_(wanted)))) if wanted else []
            jobs = {r.id: convert.job_from_row(r) for r in rows}
            placed = tuple(
                (jobs[job_id], rank) for job_id, attempt, rank in open_
                if job_id in jobs and jobs[job_id].attempt == attempt and not jobs[job_id].terminal
            )  # fmt: skip
            gang = sorted({b.instance_id for job, _ in placed if len(job.bindings) > 1 for b in job.bindings})
            addresses: dict[str, str | None] = {}
            if gang:  # the gangs' nodes' addresses: the rendezvous (MASTER_ADDR, hostfile)
                for peer in s.scalars(select(InstanceRow).where(InstanceRow.id.in_(gang))):
                    addresses[peer.id] = peer.address
            view = AgentView(instance, placed, frozenset((a[0], a[1], a[2]) for a in attempts), addresses)
            record = build(view)
            self._write_heartbeat(s, record)
        if record.events:
            for listener in self.event_listeners:
                listener(list(record.events))
        return view

    def _write_heartbeat(self, s: Session, hb: HeartbeatRecord) -> None:
        # presence: one upsert statement (a read and an update cost every heartbeat a round trip more)
        insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
        stmt = insert(AgentPresenceRow).values(instance_id=hb.instance_id, provider_id=hb.provider_id, registered_at=hb.at,
                                    last_seen=hb.at, info=hb.info)  # fmt: skip
        update: dict[str, Any] = {"last_seen": stmt.excluded.last_seen,
                                  "provider_id": func.coalesce(stmt.excluded.provider_id, AgentPresenceRow.provider_id)}  # fmt: skip
        if hb.info:
            update["info"] = stmt.excluded.info
        s.execute(stmt.on_conflict_do_update(index_elements=[AgentPresenceRow.instance_id], set_=update))
        _upsert_reports(s, hb.reports)
        for e in hb.notices:
            s.add(NoticeRow(provider=e.provider, provider_instance_id=e.provider_instance_id, kind=e.kind.value,
                            observed_at=e.observed_at, deadline=e.deadline, source=e.source, detail=e.detail))  # fmt: skip
        for ev in hb.events:
            s.add(EventRow(at=ev.at, level=ev.level, kind=ev.kind, job_id=ev.job_id, instance_id=ev.instance_id,
                           message=_redact(ev.message), data=ev.data))  # fmt: skip
        for (job_id, attempt, rank), fold in hb.usage:
            usage = s.get(AttemptUsageRow, (job_id, attempt, rank))
            if usage is None:
                usage = AttemptUsageRow(job_id=job_id, attempt=attempt, node_rank=rank, instance_id=hb.instance_id,
                                        resume_step=_resume_step(s, job_id, attempt), gpu_samples=0,
                                        gpu_util_sum=0.0, gpu_idle_samples=0, peak_gpu_memory_mib=0.0,
                                        gpu_memory_total_mib=0.0, updated_at=hb.at)  # fmt: skip
                s.add(usage)
            counters = UsageCounters(**{f.name: getattr(usage, f.name) for f in fields(UsageCounters)})
            fold(counters)
            for f in fields(UsageCounters):
                setattr(usage, f.name, getattr(counters, f.name))

    def record_presence(self, instance_id: str, *, provider_id: str | None, at: datetime, info: dict[str, Any]) -> None:
        """An agent seen (presence only: a heartbeat that carries nothing else)."""
        with self._begin() as s:
            self._write_heartbeat(s, HeartbeatRecord(instance_id, provider_id, at, info=info))

    def record_reports(self, reports: Sequence[NodeReport]) -> None:
        with self._begin() as s:
            _upsert_reports(s, reports)

    def add_notices(self, events: Sequence[InstanceEvent]) -> None:
        if not events:
            return
        with self._begin() as s:
            for e in events:
                s.add(NoticeRow(
                    provider=e.provider, provider_instance_id=e.provider_instance_id, kind=e.kind.value,
                    observed_at=e.observed_at, deadline=e.deadline, source=e.source, detail=e.detail,
                ))  # fmt: skip

    # ------------------------------------------------------------ reconciler

    def load_state(self, *, recent_terminal: int = 0) -> State:
        """Non-terminal jobs and live instances, with the inbox.

        Design choice: a step reads the whole live backlog, and at fleet scale
        (10,000 pending jobs, 2,000 instances) fetching and converting every row
        again cost over a second a step (bench/step_profile.py), though almost none
        changed. So the store keeps the domain objects it converted (``_job_rows``,
        ``_instance_rows``),
        keyed by id, with a cheap key read each step — ``version`` (bumped by every
        ``commit`` that writes the row) plus the columns other writers touch
        (``cancel_requested``) and the state — and re-reads only rows whose key
        changed; the caller gets copies it may mutate."""
        with self.session() as s:
            jobs = self._live_jobs(s)
            instances = self._live_instances(s)
            reports: dict[tuple[str, int, int], NodeReport] = {}
            if jobs:
                live_ids = select(JobRow.id).where(_LIVE_JOB)
                for r in s.scalars(select(NodeReportRow).where(NodeReportRow.job_id.in_(live_ids))):
                    owner = jobs.get(r.job_id)
                    if owner is None or r.attempt != owner.attempt:
                        continue
                    reports[(r.job_id, r.attempt, r.node_rank)] = NodeReport(
                        job_id=r.job_id, attempt=r.attempt, node_rank=r.node_rank, instance_id=r.instance_id,
                        status=r.status, exit_code=r.exit_code,
                        checkpoint=Checkpoint.from_dict(r.checkpoint) if r.checkpoint else None,
                        progress={k: v for k, v in (r.progress or {}).items() if k != NODE_ERROR_KEY},
                        reported_at=r.reported_at, message=r.message, node_error=(r.progress or {}).get(NODE_ERROR_KEY),
                    )  # fmt: skip
            presence: dict[str, AgentPresence] = {}
            if instances:  # only the part of the agent's info the planner reads (not its telemetry)
                query = select(AgentPresenceRow.instance_id, AgentPresenceRow.registered_at,
                               AgentPresenceRow.last_seen, AgentPresenceRow.info["partitions"]).where(
                    AgentPresenceRow.instance_id.in_(select(InstanceRow.id).where(_LIVE_INSTANCE)))  # fmt: skip
                for inst_id, registered_at, last_seen, parts in s.execute(query):
                    if inst_id in instances:
                        unfit = mig_unfit_of({"partitions": parts}) if parts else ()
                        presence[inst_id] = AgentPresence(inst_id, registered_at, last_seen, unfit)
            notices = [
                PendingNotice(r.id, InstanceEvent(
                    provider=r.provider, provider_instance_id=r.provider_instance_id, kind=NoticeKind(r.kind),
                    observed_at=r.observed_at, deadline=r.deadline, source=r.source, detail=r.detail,
                ))
                for r in s.scalars(select(NoticeRow).where(NoticeRow.processed_at.is_(None)).order_by(NoticeRow.id))
            ]  # fmt: skip
            unavailable = {r.key: r.until for r in s.scalars(select(UnavailableOfferingRow))}
            return State(jobs, instances, reports, presence, notices, unavailable)

    def _live_jobs(self, s: Session) -> dict[str, Job]:
        """Copies of the live jobs, converting only the rows whose key moved (``load_state``)."""
        keys = s.execute(select(*_JOB_KEY).where(_LIVE_JOB)).all()
        known = self._job_rows
        stale = [k[0] for k in keys if (c := known.get(k[0])) is None or c[0] != tuple(k[1:])]
        fresh: dict[str, tuple[tuple[Any, ...], Job]] = {}
        if stale:
            specs = self._live_specs(s, stale)
            for chunk in _chunks(stale):  # Core rows: no ORM identity map to build for a whole backlog
                for r in s.execute(select(*_JOB_COLUMNS).where(JobRow.id.in_(chunk), _LIVE_JOB)):
                    job = convert.job_from_row(r, spec=specs[r.id])
                    fresh[r.id] = (_job_key(job), job)
        rows = {k[0]: e for k in keys if (e := fresh.get(k[0]) or known.get(k[0])) is not None}
        self._job_rows = rows  # one assignment: a concurrent reader sees the old or the new map
        self._specs = {job_id: e[1].spec for job_id, e in rows.items()}
        return {job_id: convert.copy_job(e[1]) for job_id, e in rows.items()}

    def _live_instances(self, s: Session) -> dict[str, Instance]:
        """Copies of the live instances, converting only the rows whose key moved (``load_state``)."""
        keys = s.execute(select(*_INSTANCE_KEY).where(_LIVE_INSTANCE)).all()
        known = self._instance_rows
        stale = [k[0] for k in keys if (c := known.get(k[0])) is None or c[0] != tuple(k[1:])]
        fresh: dict[str, tuple[tuple[Any, ...], Instance]] = {}
        for chunk in _chunks(stale):
            for r in s.execute(select(InstanceRow.__table__).where(InstanceRow.id.in_(chunk), _LIVE_INSTANCE)):
                inst = convert.instance_from_row(r)
                fresh[r.id] = (_instance_key(inst), inst)
        rows = {k[0]: e for k in keys if (e := fresh.get(k[0]) or known.get(k[0])) is not None}
        self._instance_rows = rows
        return {inst_id: convert.copy_instance(e[1]) for inst_id, e in rows.items()}

    def _live_specs(self, s: Session, job_ids: list[str]) -> dict[str, JobSpec]:
        """The parsed specs of ``job_ids``, reading and validating only those the
        store does not hold already (``_specs``: the live jobs', kept by ``_live_jobs``).
        A spec never changes after submission (``JobSpec`` is frozen and no statement
        updates the column), so a step re-reads only the new jobs' specs instead of
        fetching and validating the whole backlog's JSON each time."""
        known = self._specs
        missing = [job_id for job_id in job_ids if job_id not in known]
        fresh: dict[str, JobSpec] = {}
        # A batch submission stores the same spec many times: read the JSON as text
        # and parse and validate each distinct text once (``JobSpec`` is frozen and
        # depends on its JSON only).
        parsed: dict[str, JobSpec] = {}
        for chunk in _chunks(missing):
            query = select(JobRow.id, cast(JobRow.spec, Text)).where(JobRow.id.in_(chunk))
            for job_id, text_ in s.execute(query):
                spec = parsed.get(text_)
                if spec is None:
                    spec = parsed[text_] = JobSpec.model_validate(json.loads(text_))
                fresh[job_id] = spec
        return {job_id: known.get(job_id) or fresh[job_id] for job_id in job_ids}

    def commit(self, changes: Changes, *, now: datetime) -> None:
        """Write one step's decisions atomically (billing segments follow instances)."""
        if changes.empty():
            return
        with self._begin() as s:
            for inst, token in changes.new_instances:
                s.add(convert.instance_to_row(inst, agent_token_hash=hash_token(token)))
            s.flush()
            # one executemany per table (bulk UPDATE by primary key), not a statement per row
            if changes.jobs:
                s.execute(update(JobRow), [{"id": job.id, **convert.job_lifecycle_values(job)} for job in changes.jobs])
            if changes.instances:
                s.execute(update(InstanceRow),
                          [{"id": inst.id, **convert.instance_lifecycle_values(inst)} for inst in changes.instances])  # fmt: skip
            billed = [*changes.instances, *(i for i, _ in changes.new_instances)]
            segments: dict[str, list[BillingSegmentRow]] = {}
            for chunk in _chunks([i.id for i in billed if i.launched_at is not None]):
                for seg in s.scalars(select(BillingSegmentRow).where(BillingSegmentRow.instance_id.in_(chunk))):
                    segments.setdefault(seg.instance_id, []).append(seg)
            for inst in billed:
                _sync_billing(s, inst, now, segments.get(inst.id, []))
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
                               message=_redact(ev.message), data=ev.data))  # fmt: skip
            if changes.notices_processed:
                s.execute(update(NoticeRow).where(NoticeRow.id.in_(changes.notices_processed)).values(processed_at=now))
            for key, (until, reason) in changes.unavailable.items():
                row = s.get(UnavailableOfferingRow, key)
                if row is None:
                    s.add(UnavailableOfferingRow(key=key, until=until, reason=reason))
                else:
                    row.until, row.reason = until, reason

        # the rows now hold version + 1 (``convert.*_lifecycle_values``): so do the objects,
        # so that a second commit of the same object in this step writes version + 2
        for job in changes.jobs:
            job.version += 1
        for inst in [*changes.instances, *(i for i, _ in changes.new_instances)]:
            inst.version += 1
        if changes.events:
            for listener in self.event_listeners:
                listener(changes.events)

    def add_event(self, record: EventRecord) -> None:
        self.commit(Changes(events=[record]), now=record.at)

    # ------------------------------------------------------------ API tokens (spotfleet.api.auth)

    def add_token(self, record: TokenRecord, token_hash: str) -> None:
        with self._sessions.begin() as s:
            s.add(ApiTokenRow(id=record.id, name=record.name, kind=record.kind, tenant=record.tenant,
                              scopes=",".join(record.scopes), token_hash=token_hash, created_at=record.created_at,
                              revoked_at=record.revoked_at))  # fmt: skip

    def tokens(self, *, include_revoked: bool = False) -> list[TokenRecord]:
        query = select(ApiTokenRow).order_by(ApiTokenRow.created_at, ApiTokenRow.id)
        if not include_revoked:
            query = query.where(ApiTokenRow.revoked_at.is_(None))
        with self.session() as s:
            return [_token_record(r) for r in s.scalars(query)]

    def token_by_hash(self, token_hash: str) -> TokenRecord | None:
        """The live (not revoked) token with this SHA-256, if any."""
        query = select(ApiTokenRow).where(ApiTokenRow.token_hash == token_hash, ApiTokenRow.revoked_at.is_(None))
        with self.session() as s:
            row = s.scalars(query).first()
            return _token_record(row) if row is not None else None

    def revoke_token(self, token_id: str, *, at: datetime) -> bool:
        """Revoke by id; False when no live token has it."""
        with self._sessions.begin() as s:
            row = s.get(ApiTokenRow, token_id)
            if row is None or row.revoked_at is not None:
                return False
            row.revoked_at = at
            return True

    # ------------------------------------------------------------ fleet hold (API writes, step reads)

    def fleet_hold(self, cluster: str) -> FleetHold | None:
        with self.session() as s:
            row = s.get(FleetHoldRow, cluster)
            return FleetHold(row.since, row.reason, row.grace_seconds) if row is not None else None

    def set_fleet_hold(self, cluster: str, hold: FleetHold) -> FleetHold:
        """Hold the fleet; an existing hold keeps its start time (``down`` twice is one down)."""
        with self._begin() as s:
            row = s.get(FleetHoldRow, cluster)
            if row is None:
                s.add(FleetHoldRow(cluster=cluster, since=hold.since, reason=hold.reason,
                                   grace_seconds=hold.grace_seconds))  # fmt: skip
                return hold
            row.reason, row.grace_seconds = hold.reason, hold.grace_seconds
            return FleetHold(row.since, row.reason, row.grace_seconds)

    def clear_fleet_hold(self, cluster: str) -> bool:
        with self._begin() as s:
            row = s.get(FleetHoldRow, cluster)
            if row is None:
                return False
            s.delete(row)
            return True

    def events(
        self,
        *,
        limit: int = 50,
        job_id: str | None = None,
        instance_id: str | None = None,
        kind_prefix: str | None = None,
        level: str | None = None,
        tenant: str | None = None,
    ) -> list[EventRecord]:
        """The newest ``limit`` events matching every filter given, oldest first.

        ``kind_prefix`` matches ``job.`` or ``job.draining``; ``tenant`` keeps the
        events of that tenant's jobs only (instance-only events belong to no tenant).
        """
        query = select(EventRow).order_by(EventRow.id.desc()).limit(limit)
        if job_id is not None:
            query = query.where(EventRow.job_id == job_id)
        if instance_id is not None:
            query = query.where(EventRow.instance_id == instance_id)
        if kind_prefix:
            query = query.where(EventRow.kind.startswith(kind_prefix, autoescape=True))
        if level is not None:
            query = query.where(EventRow.level == level)
        if tenant is not None:
            query = query.join(JobRow, JobRow.id == EventRow.job_id).where(JobRow.tenant == tenant)
        with self.session() as s:
            rows = list(s.scalars(query))
        return [
            EventRecord(at=r.at, kind=r.kind, message=r.message, level=r.level, job_id=r.job_id,
                        instance_id=r.instance_id, data=r.data or {})
            for r in reversed(rows)
        ]  # fmt: skip


_LIVE_JOB = JobRow.state.not_in([x.value for x in TERMINAL_JOB_STATES])
_LIVE_INSTANCE = InstanceRow.state.not_in([x.value for x in TERMINAL_INSTANCE_STATES])
# What says a cached row is still current: every ``commit`` bumps ``version``; the
# API writes ``cancel_requested`` without it; the rest is belt and braces.
_JOB_KEY = (JobRow.id, JobRow.version, JobRow.cancel_requested, JobRow.state, JobRow.state_since, JobRow.attempt)
_INSTANCE_KEY = (InstanceRow.id, InstanceRow.version, InstanceRow.state, InstanceRow.state_since)
_JOB_COLUMNS = [c for c in JobRow.__table__.c if c.key != "spec"]  # the spec is read (and cached) apart


def _job_key(job: Job) -> tuple[Any, ...]:
    return (job.version, job.cancel_requested, job.state.value, job.state_since, job.attempt)


def _instance_key(inst: Instance) -> tuple[Any, ...]:
    return (inst.version, inst.state.value, inst.state_since)


def _chunks(ids: Sequence[str], size: int = 900) -> Iterator[Sequence[str]]:
    """``ids`` in slices under SQLite's bound-parameter limit."""
    for k in range(0, len(ids), size):
        yield ids[k : k + size]


def _sync_billing(s: Session, inst: Instance, now: datetime, segments: list[BillingSegmentRow]) -> None:
    """Keep billing segments in step with the instance: one open segment while it
    is paid for, closed when it terminates, split when its price changes. An
    instance launched and gone within one step still gets its (closed) segment.
    ``segments``: the instance's segments in the store (read for the whole commit at once)."""
    if inst.launched_at is None:
        return  # never accepted by the cloud: nothing was paid
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


IDLE_PING_SECONDS = 10.0


def ping_when_idle(engine: Engine, *, idle: float = IDLE_PING_SECONDS) -> None:
    """Ping a pooled connection before lending it only when it sat unused ``idle`` seconds.

    SQLAlchemy's ``pool_pre_ping`` pings at every checkout, and on psycopg that
    ping is a statement of its own: one more transaction in PostgreSQL per
    request, which doubled what an agent heartbeat cost the database. A
    connection returned a moment ago is alive (or fails once, and SQLAlchemy then
    drops the whole pool as disconnected); one that sat idle, across a database
    restart say, is pinged and replaced when the ping fails."""

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_connection: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _lent(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.get("returned_at")
        if returned is None or time.monotonic() - returned < idle:
            return  # fresh, or used a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # the pool retries the checkout with a new connection
            raise DisconnectionError(
                f"a pooled connection idle {time.monotonic() - returned:.0f}s is dead: {exc}"
            ) from exc


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _resume_step(s: Session, job_id: str, attempt: int) -> int | None:
    """The checkpoint step an attempt resumed from: the newest one earlier attempts
    reported (``attempt_usage``), or the job's resume pointer when it predates that table."""
    steps = [
        s.scalar(
            select(func.max(AttemptUsageRow.checkpoint_step)).where(
                AttemptUsageRow.job_id == job_id, AttemptUsageRow.attempt < attempt
            )
        )
    ]
    job = s.get(JobRow, job_id)
    ckpt = job.checkpoint if job is not None else None
    if isinstance(ckpt, dict) and isinstance(ckpt.get("attempt"), int) and ckpt["attempt"] < attempt:
        step = ckpt.get("step")
        steps.append(step if isinstance(step, int) and not isinstance(step, bool) else None)
    known = [x for x in steps if x is not None]
    return max(known) if known else None


_SEGMENTS = (
    select(BillingSegmentRow, InstanceRow.provider_id)
    .join(InstanceRow, InstanceRow.id == BillingSegmentRow.instance_id)
    .order_by(BillingSegmentRow.start, BillingSegmentRow.id)
)


def _segments(s: Session, query: Any) -> list[SegmentRecord]:
    return [
        SegmentRecord(
            instance_id=r.instance_id, provider=r.provider, region=r.region, zone=r.zone,
            instance_type=r.instance_type, market=r.market, gpu_count=r.gpu_count,
            price_per_hour=r.price_per_hour, on_demand_price_per_hour=r.on_demand_price_per_hour,
            start=r.start, end=r.end, resource_id=provider_id or "",
        )
        for r, provider_id in s.execute(query)
    ]  # fmt: skip


def _attempts(s: Session) -> list[AttemptRecord]:
    query = (
        select(JobAttemptRow, JobRow.tenant, JobRow.family, JobRow.name)
        .join(JobRow, JobRow.id == JobAttemptRow.job_id)
        .order_by(JobAttemptRow.job_id, JobAttemptRow.node_rank, JobAttemptRow.attempt)
    )
    return [
        AttemptRecord(
            job_id=r.job_id, attempt=r.attempt, node_rank=r.node_rank, instance_id=r.instance_id, gpus=r.gpus,
            mig_slices=r.mig_slices, gpu_share=r.gpu_share, bound_at=r.bound_at, started_at=r.started_at,
            ended_at=r.ended_at, outcome=r.outcome, tenant=tenant, family=family, job_name=name,
        )
        for r, tenant, family, name in s.execute(query)
    ]  # fmt: skip


def _usage(s: Session, job_ids: Iterable[str] | None) -> dict[tuple[str, int, int], AttemptUsage]:
    query = select(AttemptUsageRow)
    if job_ids is not None:
        query = query.where(AttemptUsageRow.job_id.in_(list(job_ids)))
    return {
        (r.job_id, r.attempt, r.node_rank): AttemptUsage(
            job_id=r.job_id, attempt=r.attempt, node_rank=r.node_rank, resume_step=r.resume_step,
            first_progress_at=r.first_progress_at, last_step=r.last_step, checkpoint_step=r.checkpoint_step,
            gpu_samples=r.gpu_samples or 0,
            mean_utilization_pct=(r.gpu_util_sum / r.gpu_samples) if r.gpu_samples else None,
            idle_fraction=(r.gpu_idle_samples / r.gpu_samples) if r.gpu_samples else 0.0,
            peak_gpu_memory_mib=r.peak_gpu_memory_mib or 0.0, gpu_memory_total_mib=r.gpu_memory_total_mib or 0.0,
            isolation=r.isolation, isolation_note=r.isolation_note, given_share=r.given_share,
            mean_used_share=(r.used_share_sum / r.share_samples) if r.share_samples else None,
            memory_limit_mib=r.memory_limit_mib,
        )
        for r in s.scalars(query)
    }  # fmt: skip


def _upsert_reports(s: Session, reports: Sequence[NodeReport]) -> None:
    """The newest report per (job, attempt, node) replaces the one before."""
    for r in reports:
        values = {
            "instance_id": r.instance_id, "status": r.status, "exit_code": r.exit_code,
            "checkpoint": r.checkpoint.to_dict() if r.checkpoint else None,
            "progress": {**r.progress, **({NODE_ERROR_KEY: r.node_error} if r.node_error else {})},
            "reported_at": r.reported_at, "message": r.message,
        }  # fmt: skip
        row = s.get(NodeReportRow, (r.job_id, r.attempt, r.node_rank))
        if row is None:
            s.add(NodeReportRow(job_id=r.job_id, attempt=r.attempt, node_rank=r.node_rank, **values))
        else:
            for key, value in values.items():
                setattr(row, key, value)
