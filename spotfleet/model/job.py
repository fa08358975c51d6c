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
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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

# Retries after a failure wait RETRY_BACKOFF_BASE × 2^(failures-1), at most RETRY_BACKOFF_MAX.
RETRY_BACKOFF_BASE = timedelta(seconds=15)
RETRY_BACKOFF_MAX = timedelta(minutes=10)
RETRY_REASON = "exited"  # the reason of a failure's requeue starts with this (``Job.retry_not_before``)
NODE_FAILED = "failed:node"  # attempt outcome: a failure that looks like the node's, not the job's
# Text in a failed job's last output that blames the node: CUDA/NVML errors, Xid, ECC, a GPU off the bus.
NODE_ERROR_TEXT = re.compile(
    r"CUDA[ _]error|CUDA_ERROR_\w+|cudaError\w*|NVML[ _]?(error|ERROR)|NVMLError\w*|Xid\b|"
    r"uncorrectable ECC|GPU is lost|fallen off the bus|unknown error.*cuda",
    re.IGNORECASE,
)


def is_failure_outcome(outcome: str | None) -> bool:
    """``failed`` or ``failed:node`` (an attempt that ended in a non-zero exit)."""
    return outcome is not None and outcome.split(":")[0] == "failed"


def node_failure(exit_code: int | None, text: str | None) -> str | None:
    """Why a failure looks like the node's fault, or None: killed by a signal
    (a negative return code, or 129–159 from a shell), or CUDA/NVML error text."""
    if exit_code is not None and (exit_code < 0 or 128 < exit_code < 160):
        sig = -exit_code if exit_code < 0 else exit_code - 128
        return f"killed by signal {sig}"
    match = NODE_ERROR_TEXT.search(text or "")
    return f"GPU error in its output: {match.group(0)!r}" if match else None


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
    provider: str | None = None  # where it was written: the controller stamps the instance's provider
    region: str | None = None  # and region (resuming elsewhere moves it: egress)

    def to_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "step": self.step, "at": self.at.isoformat(), "attempt": self.attempt}
        if self.provider is not None:
            out |= {"provider": self.provider, "region": self.region}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checkpoint:
        return cls(str(data["path"]), data.get("step"), datetime.fromisoformat(data["at"]), int(data.get("attempt", 0)),
                   data.get("provider"), data.get("region"))  # fmt: skip


def progress_at_checkpoint(progress: dict[str, Any], checkpoint: Checkpoint | None) -> dict[str, Any]:
    """The progress a requeued job resumes with: its last report, rolled back to
    the step of the checkpoint it resumes from.

    Why: a report counts the work done since the last checkpoint too. An attempt
    that ends without saving (reclaimed while a save longer than the notice was
    still being written, killed after a drain's grace, crashed, its agent lost)
    throws that work away, and until the next attempt reports, the deadline rules
    would read a slack too high by up to a checkpoint interval.

    Only a report with an integer ``step`` can be rolled back: ``step`` becomes
    the checkpoint's (0 with no checkpoint: the job starts over), and ``fraction``
    and ``done_s`` scale with it (taken as proportional to steps). A report
    without a step, or a checkpoint without one, is returned as it is; progress
    only ever moves back.
    """
    share = checkpoint_share(progress, checkpoint)
    if share is None or share >= 1.0:
        return progress
    out = dict(progress, step=0 if checkpoint is None else checkpoint.step)
    for key in ("fraction", "done_s"):
        value = progress.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = round(value * share, 6)
    return out


def checkpoint_share(progress: dict[str, Any], checkpoint: Checkpoint | None) -> float | None:
    """The share of the reported progress that the checkpoint holds (0 with none,
    1 when it is at the reported step), or None when the reports cannot say: no
    integer ``step`` reported, a checkpoint without one, or one ahead of it."""
    step = progress.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        return None
    resume = 0 if checkpoint is None else checkpoint.step
    if not isinstance(resume, int) or isinstance(resume, bool) or not 0 <= resume <= step:
        return None
    return resume / step


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

    @property
    def retry_not_before(self) -> datetime | None:
        """When a job requeued after a failure may run again (exponential
        backoff), or None when it is not waiting for a retry."""
        if self.state is not J.PENDING or self.failures <= 0 or not self.history:
            return None
        last = self.history[-1]
        if last.to_state != J.PENDING.value or not last.reason.startswith(RETRY_REASON):
            return None
        delay = min(RETRY_BACKOFF_BASE * (1 << min(self.failures - 1, 20)), RETRY_BACKOFF_MAX)
        return last.at + delay

    @property
    def runs(self) -> int:
        """Attempts that actually started (BOUND → RUNNING), counting the current one
        once it has started. ``attempt`` numbers every binding, including those whose
        capacity never came (a launch that failed for capacity or quota): it is the
        identity of a binding; ``runs`` is what a user calls an attempt (issue 14)."""
        return sum(1 for h in self.history if h.from_state == J.BOUND.value and h.to_state == J.RUNNING.value)

    @property
    def run_number(self) -> int:
        """The run the current binding is (1-based): ``SPOTFLEET_ATTEMPT`` of the job's process."""
        last_bound = max((n for n, h in enumerate(self.history) if h.to_state == J.BOUND.value), default=0)
        started = any(
            h.from_state == J.BOUND.value and h.to_state == J.RUNNING.value for h in self.history[last_bound:]
        )
        return self.runs + (0 if started else 1)

    def transition(self, to: JobState, *, at: datetime, reason: str = "") -> None:
        """Move to ``to`` or raise ``IllegalTransition``; records history."""
        JOB_MACHINE.move(self, to, at=at, reason=reason, what=self.id)
