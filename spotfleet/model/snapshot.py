"""The planner's input (``Snapshot``) and output vocabulary (``Command``).

``plan()`` is a pure function of a ``Snapshot`` and a clock reading: the live
controller, the simulator and the benchmarks all build a snapshot and call the
same function. Policies read the snapshot and return commands — data, not
side effects; the controller's executor carries them out.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import Instance
from spotfleet.model.job import Binding, Checkpoint, Job
from spotfleet.model.offering import Offering, Offerings


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What a node agent last said about one node of one job attempt."""

    job_id: str
    attempt: int
    node_rank: int
    instance_id: str
    status: str  # started | running | exited | refused
    exit_code: int | None = None
    checkpoint: Checkpoint | None = None
    progress: Mapping[str, Any] = field(default_factory=dict)
    reported_at: datetime | None = None
    message: str | None = None  # why the agent refused or stopped this node
    node_error: str | None = None  # the failed job's output blamed the node (CUDA/NVML error text)


@dataclass(frozen=True, slots=True)
class AgentPresence:
    """When an instance's agent registered and last heartbeated."""

    instance_id: str
    registered_at: datetime
    last_seen: datetime
    mig_unfit: tuple[tuple[str, str], ...] = ()  # (profile or "*", why the agent cannot provide it)


@dataclass(frozen=True, slots=True)
class Budget:
    """A spend-rate cap in USD/hour; ``tenant=None`` is the global cap."""

    max_per_hour: float
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One past run of a job family, from the store: what forecasts learn from.

    ``work`` is the progress the job reported over ``duration_s`` (in the job's
    own unit, e.g. steps or samples); ``peak_gpu_memory_gib`` the most GPU memory
    any of its GPUs used. Unknown fields stay ``None``.
    """

    family: str
    gpu: str
    gpus: int
    duration_s: float
    succeeded: bool = True
    peak_gpu_memory_gib: float | None = None
    work: float | None = None


@dataclass(frozen=True, slots=True)
class PoolExposure:
    """Spot exposure observed in one pool (``Offering.key``): instance-hours
    alive and how many of them ended in an interruption."""

    pool: str
    hours: float
    interruptions: int


@dataclass(frozen=True, slots=True)
class PoolAvailability:
    """Spot availability the controller observed in one pool, or one instance
    type's market across zones (``controller/availability.py``): hours seen
    available and unavailable, how many available runs ended, and the state now."""

    key: str
    up_hours: float
    down_hours: float
    ended_runs: int
    up_now: bool = True
    recent_runs_h: tuple[float, ...] = ()  # lengths of the last completed up runs
    up_for_h: float = 0.0  # how long the current up run has lasted (0 when down)
    # the same evidence with each hour and run weighted by its age (the log forgets,
    # ``controller.availability.HALF_LIFE_H``); None and (): nothing has faded, the totals above
    recent_up_h: float | None = None
    recent_down_h: float | None = None
    recent_ended: float | None = None
    recent_runs_weight: tuple[float, ...] = ()  # one per ``recent_runs_h``; () : all 1

    def evidence(self) -> tuple[float, float, float]:
        """Up hours, down hours and ended runs as the forecasts weigh them: the
        recency-weighted figures where some evidence has faded, else the totals."""
        return (self.up_hours if self.recent_up_h is None else self.recent_up_h,
                self.down_hours if self.recent_down_h is None else self.recent_down_h,
                self.ended_runs if self.recent_ended is None else self.recent_ended)  # fmt: skip


def spot_market_key(offering: Offering) -> str:
    """The key of an instance type's spot market across all its zones (``PoolAvailability.key``)."""
    return spot_pool_key(offering.provider, offering.instance_type, "*")


def spot_pool_key(provider: str, instance_type: str, zone: str) -> str:
    """``Offering.key`` of a spot pool (``zone="*"``: its market, ``spot_market_key``),
    for callers that name a pool without an offering (replayed traces)."""
    return f"{provider}:spot:{instance_type}:{zone}"


def market_key_of(pool_key: str) -> str:
    """The market key (``spot_market_key``) of a spot pool's ``Offering.key``."""
    return pool_key.rsplit(":", 1)[0] + ":*"


def provider_of_key(pool_key: str) -> str:
    """The provider (its name in the config) of a pool or market key."""
    return pool_key.split(":", 1)[0]


@dataclass(slots=True)
class Snapshot:
    """Everything the planner may look at, read at one instant.

    ``jobs`` and ``instances`` are the non-terminal ones (plus instances that
    terminated during this step). ``observed`` is what the providers reported
    this step (``None`` when a provider was not listed this step: absence of
    evidence then means nothing).
    """

    now: datetime
    jobs: dict[str, Job]
    instances: dict[str, Instance]
    offerings: Offerings
    reports: dict[tuple[str, int, int], NodeReport] = field(default_factory=dict)
    presence: dict[str, AgentPresence] = field(default_factory=dict)
    events: list[InstanceEvent] = field(default_factory=list)
    unavailable: dict[str, datetime] = field(default_factory=dict)  # offering key -> until
    avoid: dict[str, frozenset[str]] = field(default_factory=dict)  # job -> instances its retries keep off
    budgets: tuple[Budget, ...] = ()
    new_id: Callable[[str], str] = field(default_factory=lambda: random_ids())
    # History for forecasts (policies/forecast.py); empty means "use the priors".
    runs: tuple[RunRecord, ...] = ()
    exposure: tuple[PoolExposure, ...] = ()
    availability: tuple[PoolAvailability, ...] = ()

    def usable_offerings(self) -> Offerings:
        """Offerings not marked unavailable by a recent capacity error."""
        now = self.now
        return self.offerings.where(lambda o: o.available and self.unavailable.get(o.key, now) <= now)

    def jobs_on(self, instance_id: str) -> list[Job]:
        return [j for j in self.jobs.values() if not j.terminal and instance_id in j.instance_ids]


def random_ids() -> Callable[[str], str]:
    """Ids for new instances: random (unique across controllers and restarts)."""
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:12]}"


def sequential_ids(start: int = 1) -> Callable[[str], str]:
    """Deterministic ids for tests and the simulator."""
    counter = itertools.count(start)
    return lambda prefix: f"{prefix}-{next(counter):06d}"


# ---------------------------------------------------------------- commands


@dataclass(frozen=True, slots=True)
class Bind:
    """Place a pending job: one binding per node."""

    job_id: str
    bindings: tuple[Binding, ...]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Launch:
    """Buy one instance of ``offering`` (alternatives are acceptable substitutes).

    ``instance_id`` is the controller's id for the new instance; jobs may be bound
    to it in the same plan (they wait for it in BOUND).
    """

    instance_id: str
    offering: Offering
    alternatives: tuple[Offering, ...] = ()
    reason: str = ""
    placement_group: str | None = None
    reserved_for: str | None = None  # a replacement for this (draining) job


@dataclass(frozen=True, slots=True)
class Terminate:
    """Give an instance back. Never issued for an instance holding a
    non-interruptible job (plan validation enforces it)."""

    instance_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Drain:
    """Cordon an instance and ask its jobs to checkpoint and leave."""

    instance_id: str
    reason: str
    kind: NoticeKind | None = None
    deadline: datetime | None = None
    for_job: str | None = None  # preempted to free budget for this job: the instance's spend is held for it


@dataclass(frozen=True, slots=True)
class Preempt:
    """Ask one job to checkpoint and go back to the queue (never a kill)."""

    job_id: str
    reason: str


Command = Bind | Launch | Terminate | Drain | Preempt
