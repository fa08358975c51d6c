"""A job's lifecycle: an enforced state machine with history.

::

    PENDING ──bind──▶ BOUND ──agent started──▶ RUNNING ──exit 0──▶ SUCCEEDED
       ▲                │                       │  │
       │◀──capacity lost┘                       │  └─exit≠0─▶ FAILED (or PENDING to retry)
       │◀─────────checkpointed / instance lost──┤
       │                                        ▼
       └──────────────checkpointed────────── DRAINING (notice or preemption)

Any non-terminal state can go to CANCELLED.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spotfleet.model.spec import JobSpec
from spotfleet.model.statemachine import StateMachine, TransitionRecord


class JobState(enum.StrEnum):
    PENDING = "pending"
    BOUND = "bound"
    RUNNING = "running"
    DRAINING = "draining"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


J = JobState
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    J.PENDING: frozenset(
        {
            J.BOUND,  # placed on capacity (existing, or being bought for it)
            J.CANCELLED,  # user cancelled before it ran
            J.FAILED,  # cannot ever be placed (e.g. spec no offering satisfies) — reported, not silent
        }
    ),
    J.BOUND: frozenset(
        {
            J.RUNNING,  # every node's agent reported the process started
            J.PENDING,  # the capacity it waited for failed to launch or was reclaimed before start
            J.DRAINING,  # a notice arrived before it started; nothing to checkpoint but wait for release
            J.CANCELLED,  # user cancelled
        }
    ),
    J.RUNNING: frozenset(
        {
            J.SUCCEEDED,  # exited 0 on every node
            J.FAILED,  # exited non-zero with no retries left
            J.PENDING,  # retry after a failure, or its instance vanished without notice
            J.DRAINING,  # interruption notice / preemption: asked to checkpoint and exit
            J.CANCELLED,  # user cancelled; the agent kills it
        }
    ),
    J.DRAINING: frozenset(
        {
            J.PENDING,  # checkpointed (or killed after the grace) and requeued to resume
            J.SUCCEEDED,  # finished while draining
            J.FAILED,  # crashed while draining with no retries left
            J.CANCELLED,  # user cancelled
        }
    ),
    J.SUCCEEDED: frozenset(),
    J.FAILED: frozenset(),
    J.CANCELLED: frozenset(),
}
TERMINAL_JOB_STATES = frozenset({J.SUCCEEDED, J.FAILED, J.CANCELLED})
ACTIVE_JOB_STATES = frozenset({J.BOUND, J.RUNNING, J.DRAINING})

JOB_MACHINE: StateMachine[JobState] = StateMachine("job", JOB_TRANSITIONS, TERMINAL_JOB_STATES)


@dataclass(frozen=True, slots=True)
class Binding:
    """One node of a job placed on one instance, with the GPUs it may use."""

    node_rank: int
    instance_id: str
    gpu_indices: tuple[int, ...] = ()
    mig_slices: int = 0  # compute slices (of 7) when the job asked for a MIG profile
    gpu_fraction: float = 0.0  # a time-sliced share of one GPU when the job asked for one

    @property
    def gpu_share(self) -> float:
        """GPUs' worth held: whole GPUs, slices/7, or the fraction (the ledger attributes by it)."""
        if self.mig_slices:
            return self.mig_slices / 7
        if self.gpu_fraction:
            return self.gpu_fraction
        return float(len(self.gpu_indices))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rank": self.node_rank,
            "instance": self.instance_id,
            "gpus": list(self.gpu_indices),
            "mig": self.mig_slices,
        }
        if self.gpu_fraction:
            out["fraction"] = self.gpu_fraction
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Binding:
        return cls(
            int(data["rank"]),
            str(data["instance"]),
            tuple(int(g) for g in data.get("gpus", ())),
            int(data.get("mig", 0)),
            float(data.get("fraction", 0.0)),
        )


@dataclass(slots=True)
class Checkpoint:
    """The latest checkpoint a job reported (the resume pointer)."""

    path: str
    step: int | None
    at: datetime
    attempt: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "step": self.step, "at": self.at.isoformat(), "attempt": self.attempt}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        return cls(str(data["path"]), data.get("step"), datetime.fromisoformat(data["at"]), int(data.get("attempt", 0)))


@dataclass(slots=True)
class Job:
    """A submitted job and where it stands."""

    id: str
    spec: JobSpec
    state: JobState
    created_at: datetime
    state_since: datetime
    attempt: int = 0  # increments at every (re)start
    failures: int = 0  # non-zero exits (interruptions do not count)
    interruptions: int = 0
    bindings: tuple[Binding, ...] = ()
    checkpoint: Checkpoint | None = None
    progress: dict[str, Any] = field(default_factory=dict)
    cancel_requested: bool = False
    exit_code: int | None = None
    message: str = ""
    drain_deadline: datetime | None = None
    history: list[TransitionRecord] = field(default_factory=list)
    version: int = 0

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_JOB_STATES

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return tuple(b.instance_id for b in self.bindings)

    def transition(self, to: JobState, *, at: datetime, reason: str = "") -> None:
        """Move to ``to`` or raise ``IllegalTransition``; records history."""
        if to is self.state:
            return
        JOB_MACHINE.check(self.state, to, what=self.id)
        self.history.append(TransitionRecord(self.state.value, to.value, at, reason))
        self.state = to
        self.state_since = at
        if reason:
            self.message = reason
