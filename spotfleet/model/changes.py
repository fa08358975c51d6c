"""What one reconcile step decided, as plain records: the step writes them, the
store persists them in one transaction.

They live here, not in ``spotfleet.store``, so the pure planner
(``controller/{plan,sync,apply,step}.py``) and the policies never import the
module that speaks SQL (``tests/test_layers.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spotfleet.ledger.types import UsageCounters
from spotfleet.model.events import InstanceEvent
from spotfleet.model.instance import Instance
from spotfleet.model.job import Job
from spotfleet.model.snapshot import NodeReport


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
class FleetHold:
    """``spotfleet down`` is in effect: buy nothing, drain and give back everything."""

    since: datetime
    reason: str
    grace_seconds: float


@dataclass(frozen=True, slots=True)
class AgentView:
    """What the controller knows about one agent's instance when it heartbeats."""

    instance: Instance
    placed: tuple[tuple[Job, int], ...]  # (job, node rank) of every attempt bound here now
    ran_here: frozenset[tuple[str, int, int]]  # (job, attempt, rank) of every attempt ever bound here
    addresses: Mapping[str, str | None] = field(default_factory=dict)  # instance id → address, the gangs' nodes


UsageUpdate = tuple[tuple[str, int, int], Callable[[UsageCounters], None]]


@dataclass(frozen=True, slots=True)
class HeartbeatRecord:
    """Everything one heartbeat writes, in one transaction (``Store.agent_exchange``)."""

    instance_id: str
    provider_id: str | None
    at: datetime
    info: dict[str, Any] = field(default_factory=dict)  # replaces the presence info when non-empty
    reports: Sequence[NodeReport] = ()
    notices: Sequence[InstanceEvent] = ()
    events: Sequence[EventRecord] = ()
    usage: Sequence[UsageUpdate] = ()  # folds applied to attempt_usage rows (created on first sight)
