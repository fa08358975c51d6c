"""Tables. Every change here needs an Alembic migration (tests compare the two).

Ownership of columns matters because two writers share rows: the reconcile step
is the only writer of lifecycle columns (state, bindings, history...); the API
writes submissions, ``jobs.cancel_requested`` and the agent inbox tables
(``node_reports``, ``agent_presence``, ``notices``). The store's save methods
write only the reconciler's columns, so neither can undo the other's update.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out, on SQLite (which stores naive) too."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use timezone-aware UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    family: Mapped[str] = mapped_column(String(128), index=True)
    priority: Mapped[str] = mapped_column(String(32))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(32), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    state_since: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    interruptions: Mapped[int] = mapped_column(Integer, default=0)
    bindings: Mapped[list[Any]] = mapped_column(JSON, default=list)
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)  # written by the API
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    drain_deadline: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    history: Mapped[list[Any]] = mapped_column(JSON, default=list)
    version: Mapped[int] = mapped_column(Integer, default=0)


class InstanceRow(Base):
    __tablename__ = "instances"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    provider: Mapped[str] = mapped_column(String(32))
    provider_id: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    request_id: Mapped[str] = mapped_column(String(128), unique=True)
    offering: Mapped[dict[str, Any]] = mapped_column(JSON)
    market: Mapped[str] = mapped_column(String(16))
    instance_type: Mapped[str] = mapped_column(String(64))
    region: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str] = mapped_column(String(64))
    price_per_hour: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(32), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    state_since: Mapped[datetime] = mapped_column(UTCDateTime())
    launched_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    terminated_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    idle_since: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    address: Mapped[str | None] = mapped_column(String(256), nullable=True)
    cordoned: Mapped[bool] = mapped_column(Boolean, default=False)
    reserved_for: Mapped[str | None] = mapped_column(String(64), nullable=True)
    notice_kind: Mapped[str | None] = mapped_column(String(32), nullable=True)
    notice_deadline: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    agent_token_hash: Mapped[str] = mapped_column(String(128), index=True)
    launch_attempts: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str] = mapped_column(Text, default="")
    history: Mapped[list[Any]] = mapped_column(JSON, default=list)
    version: Mapped[int] = mapped_column(Integer, default=0)


class BillingSegmentRow(Base):
    """Paid time of one instance at one price (a new segment when the price changes)."""

    __tablename__ = "billing_segments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    provider: Mapped[str] = mapped_column(String(32))
    region: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str] = mapped_column(String(64))
    instance_type: Mapped[str] = mapped_column(String(64))
    market: Mapped[str] = mapped_column(String(16))
    gpu_count: Mapped[int] = mapped_column(Integer)
    price_per_hour: Mapped[float] = mapped_column(Float)
    on_demand_price_per_hour: Mapped[float] = mapped_column(Float)
    start: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    end: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class JobAttemptRow(Base):
    """One node of one attempt of a job on one instance: what the ledger attributes."""

    __tablename__ = "job_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    node_rank: Mapped[int] = mapped_column(Integer)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    gpus: Mapped[int] = mapped_column(Integer)
    mig_slices: Mapped[int] = mapped_column(Integer, default=0)
    gpu_share: Mapped[float] = mapped_column(Float, default=0.0)  # GPUs' worth held (whole, slices/7, fraction)
    bound_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(32), nullable=True)

    __table_args__ = (Index("ix_job_attempts_job_attempt", "job_id", "attempt"),)


class NodeReportRow(Base):
    """Inbox: the latest status an agent reported for one node of a job attempt."""

    __tablename__ = "node_reports"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    reported_at: Mapped[datetime] = mapped_column(UTCDateTime())
    message: Mapped[str | None] = mapped_column(Text, nullable=True)  # why the agent refused or stopped it


class AgentPresenceRow(Base):
    """Inbox: when each instance's agent registered and was last heard from."""

    __tablename__ = "agent_presence"

    instance_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    provider_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime())
    info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class NoticeRow(Base):
    """Inbox: interruption notices and state changes, from agents or cloud event buses."""

    __tablename__ = "notices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    provider: Mapped[str] = mapped_column(String(32))
    provider_instance_id: Mapped[str] = mapped_column(String(128), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    observed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    deadline: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    source: Mapped[str] = mapped_column(String(64), default="")
    detail: Mapped[str] = mapped_column(Text, default="")
    processed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, index=True)


class EventRow(Base):
    """The audit log: what the controller decided and what happened, for humans."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    level: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    instance_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class UnavailableOfferingRow(Base):
    """Pools recently out of capacity (or interrupted): avoided until ``until``."""

    __tablename__ = "unavailable_offerings"

    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    until: Mapped[datetime] = mapped_column(UTCDateTime())
    reason: Mapped[str] = mapped_column(Text, default="")


class AttemptUsageRow(Base):
    """Telemetry inbox (written by the heartbeat path, read by the ledger): one
    node of one job attempt's progress, checkpoints and GPU use as its agent
    reported them. Restart overhead and redone work are computed from it."""

    __tablename__ = "attempt_usage"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[str] = mapped_column(String(64))
    resume_step: Mapped[int | None] = mapped_column(Integer, nullable=True)  # checkpoint step it started from
    first_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    first_progress_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_progress_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer, nullable=True)  # newest checkpoint of this attempt
    checkpoint_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    gpu_samples: Mapped[int] = mapped_column(Integer, default=0)
    gpu_util_sum: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_idle_samples: Mapped[int] = mapped_column(Integer, default=0)  # samples under the idle threshold
    peak_gpu_memory_mib: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_memory_total_mib: Mapped[float] = mapped_column(Float, default=0.0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # GPU partitioning (docs/gpu-partitioning.md): what the agent applied and what the job used
    isolation: Mapped[str | None] = mapped_column(String(32), nullable=True)  # mig | mps | time-sliced | whole
    isolation_note: Mapped[str | None] = mapped_column(Text, nullable=True)
    given_share: Mapped[float | None] = mapped_column(Float, nullable=True)  # of one GPU
    share_samples: Mapped[int] = mapped_column(Integer, default=0)
    used_share_sum: Mapped[float] = mapped_column(Float, default=0.0)  # SM share used, summed over samples
    memory_limit_mib: Mapped[float | None] = mapped_column(Float, nullable=True)


class FleetHoldRow(Base):
    """Written by the API (``spotfleet down``), read by the step: while a row
    exists for the cluster, the controller buys nothing and gives every instance
    back after draining it (``spotfleet.policies.teardown``)."""

    __tablename__ = "fleet_hold"

    cluster: Mapped[str] = mapped_column(String(64), primary_key=True)
    since: Mapped[datetime] = mapped_column(UTCDateTime())
    reason: Mapped[str] = mapped_column(Text, default="")
    grace_seconds: Mapped[float] = mapped_column(Float, default=120.0)


class ApiTokenRow(Base):
    """A scoped API token (``spotfleet.api.auth``): only its SHA-256 is kept.
    Written by ``spotfleet token`` and ``/v1/tokens``; read on every request."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # public part, shown by `token list`
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))  # admin | tenant | viewer
    tenant: Mapped[str | None] = mapped_column(String(64), nullable=True)
    scopes: Mapped[str] = mapped_column(String(64), default="")  # comma-separated: submit,read
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ControllerLeaseRow(Base):
    """Leader election for replicated controllers: one row per cluster. The
    holder renews ``expires_at``; a replica takes over an expired lease by
    raising ``epoch``; every write of a step checks the epoch (fencing)."""

    __tablename__ = "controller_lease"

    cluster: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    epoch: Mapped[int] = mapped_column(Integer, default=1)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    renewed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
