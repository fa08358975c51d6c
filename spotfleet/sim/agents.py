"""Simulated node agents and the jobs they run: how work advances on the virtual clock.

The simulator plays every node agent through the controller's real agent entry
points (``register_agent``, ``heartbeat``), so the controller learns about starts,
exits, checkpoints and progress exactly as it does from real agents. What the
agents report follows this model (docs/simulator.md):

- an attempt starts when every node of the job has its assignment; the first
  ``restart`` seconds of every attempt make no progress (boot, restore, warm-up)
  but are paid for; then one second of work per second;
- with ``checkpoint.interval`` set, the job saves a checkpoint every interval of
  productive time (the *periodic* checkpoint);
- asked to drain (an interruption notice or a policy's drain) with at least
  ``checkpoint_seconds`` before the deadline, the job saves its progress, stops
  working and exits with the checkpointed exit code ``checkpoint_seconds`` later;
  with less time it is killed at the deadline and keeps only its periodic
  checkpoint; an instance reclaimed before the save completes loses the same way;
- a job that reaches its work exits 0 that very second;
- rank 0 reports each checkpoint once it is written (a periodic one as it is
  saved, a requested one when its save completes), and progress with a
  ``step`` (a second of work) in the checkpoint step's unit, as a real job does
  through ``spotfleet.checkpoint``: a requeued job's progress rolls back to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from spotfleet.wire import CheckpointInfo, JobStatus

CHECKPOINTED_EXIT = 85  # the controller's "checkpointed, resume me" code (controller/sync.py)
KILLED_EXIT = 137


@dataclass(slots=True)
class JobTrack:
    """One job's real progress (the simulator's ground truth, not the controller's view)."""

    job_id: str
    work: float  # seconds of work the job needs
    nodes: int
    restart: float  # seconds of non-productive time at every (re)start
    interval: float | None = None  # periodic checkpoint, seconds of productive time
    checkpoint_seconds: float = 30.0
    saved: float = 0.0  # durable progress: what a restart resumes from
    saved_at: datetime | None = None  # when that checkpoint was written
    attempt: int = 0
    ranks: set[int] = field(default_factory=set)
    started: datetime | None = None  # every node up: the attempt's clock runs
    base: float = 0.0
    stopped_at: datetime | None = None  # stopped working (checkpointing to leave)
    stop_progress: float = 0.0
    exit_at: datetime | None = None
    exit_code: int | None = None
    settled: bool = True  # the attempt's outcome has been folded into ``saved``
    finished_at: datetime | None = None
    starts: int = 0
    lost_seconds: float = 0.0  # work redone because of rollbacks

    # ------------------------------------------------------------ progress

    def done(self, at: datetime) -> float:
        """Progress of the current attempt at ``at`` (``saved`` between attempts)."""
        if self.started is None:
            return self.saved
        until = at if self.stopped_at is None else min(at, self.stopped_at)
        productive = max(0.0, (until - self.started).total_seconds() - self.restart)
        return min(self.base + productive, self.work)

    def periodic(self, at: datetime) -> tuple[float, datetime | None]:
        """The current attempt's latest periodic checkpoint by ``at``: (progress, when
        it was written), or (``saved``, ``saved_at``) when it has written none."""
        if self.started is None or not self.interval:
            return self.saved, self.saved_at
        until = at if self.stopped_at is None else min(at, self.stopped_at)
        productive = max(0.0, (until - self.started).total_seconds() - self.restart)
        made = min(math.floor(productive / self.interval) * self.interval, self.work - self.base)
        if made <= 0:
            return self.saved, self.saved_at
        return self.base + made, self.started + timedelta(seconds=self.restart + made)

    def completion_at(self) -> datetime | None:
        if self.started is None or self.stopped_at is not None or self.exit_at is not None:
            return None
        return self.started + timedelta(seconds=self.restart + self.work - self.base)

    def productive_from(self) -> datetime | None:
        """When the current attempt's restart delay ends."""
        if self.started is None:
            return None
        return self.started + timedelta(seconds=self.restart)

    def wakeups(self) -> list[datetime]:
        return [t for t in (self.completion_at(), self.exit_at, self.productive_from()) if t is not None]

    # ------------------------------------------------------------ lifecycle

    def assign(self, attempt: int, rank: int, at: datetime) -> None:
        """The controller wants node ``rank`` of ``attempt`` running."""
        if attempt < self.attempt:
            return
        if attempt > self.attempt:
            self.end_attempt(at)
            self.attempt, self.ranks = attempt, set()
            self.started, self.stopped_at, self.exit_at, self.exit_code = None, None, None, None
            self.base, self.settled = self.saved, False
        self.ranks.add(rank)
        if self.started is None and len(self.ranks) >= self.nodes:
            self.started = at
            self.starts += 1

    def drain(self, deadline: datetime, at: datetime) -> None:
        """Asked to checkpoint and leave by ``deadline``."""
        if self.exit_at is not None or self.stopped_at is not None:
            return
        if self.started is None:
            self.exit_at, self.exit_code = at, CHECKPOINTED_EXIT  # nothing running yet
            self.stopped_at, self.stop_progress = at, self.saved
            return
        if (deadline - at).total_seconds() >= self.checkpoint_seconds:
            self.stop_progress = self.done(at)
            self.stopped_at = at
            self.exit_at = at + timedelta(seconds=self.checkpoint_seconds)
            self.exit_code = CHECKPOINTED_EXIT
        else:
            self.exit_at, self.exit_code = max(deadline, at), KILLED_EXIT

    def update(self, at: datetime) -> None:
        """Finish the attempt if its work is done by ``at``; settle exits that happened."""
        done_at = self.completion_at()
        if done_at is not None and done_at <= at:
            self.exit_at, self.exit_code = done_at, 0
        if self.exit_at is not None and self.exit_at <= at and not self.settled:
            self._settle(self.exit_at)

    def _settle(self, at: datetime) -> None:
        """Fold the attempt's outcome into the durable progress."""
        reached = self.done(at)
        when: datetime | None
        if self.exit_code == 0:
            keep, when = self.work, at
            self.finished_at = self.finished_at or at
        elif self.exit_code == CHECKPOINTED_EXIT and self.stopped_at is not None:
            keep, when = self.stop_progress, self.stopped_at
        else:
            keep, when = self.periodic(at)
        if keep > self.saved and when is not None:
            self.saved, self.saved_at = keep, when
        self.lost_seconds += max(reached - keep, 0.0)
        self.settled = True

    def end_attempt(self, at: datetime) -> None:
        """The attempt is over (reclaimed, killed, or the controller moved on)."""
        if self.settled:
            return
        self.update(at)
        if not self.settled:
            if self.exit_at is None or self.exit_at > at:
                # killed before exiting (a checkpoint still being written is lost)
                self.exit_at, self.exit_code = at, KILLED_EXIT
            self._settle(at)
        self.started = None

    # ------------------------------------------------------------ reporting

    def status(self, rank: int, at: datetime) -> JobStatus:
        self.update(at)
        done = self.done(at) if self.exit_code != 0 else self.work
        progress = {
            "step": int(done),  # a step is a second of work: the unit of the checkpoint's step
            "done_s": round(done, 3),
            "fraction": round(done / self.work, 6) if self.work else 1.0,
        }
        exited = self.exit_at is not None and self.exit_at <= at
        checkpoint = None
        saved, when = self.periodic(at)  # as a real job reports each save once written
        if exited and self.exit_code == CHECKPOINTED_EXIT and self.stopped_at is not None:
            saved, when = self.stop_progress, self.stopped_at  # the save on request, once it is complete
        if when is not None:
            checkpoint = CheckpointInfo(path=f"sim://{self.job_id}/{int(saved)}", step=int(saved), at=when)
        return JobStatus(
            job_id=self.job_id,
            attempt=self.attempt,
            node_rank=rank,
            status="exited" if exited else ("running" if self.started is not None else "started"),
            exit_code=self.exit_code if exited else None,
            checkpoint=checkpoint if rank == 0 else None,
            progress=progress if rank == 0 else {},
        )


@dataclass(slots=True)
class SimAgent:
    """The node agent of one simulated instance."""

    provider_id: str
    token: str
    registered: bool = False
    runs: set[tuple[str, int, int]] = field(default_factory=set)  # (job, attempt, rank)
