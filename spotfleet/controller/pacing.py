"""When the next reconcile step may run: wakes coalesced, steps kept to half the time.

Every submission, cancel, agent registration or job exit wakes the step. A
burst of them (2,000 agents registering after a fleet restart, a sweep
submitted job by job) must cost a few steps, not one each, and must not keep
the step running back to back: the step is CPU-bound Python in the same
process as the API, so while it runs, heartbeats wait for the GIL. Hence:

- a wake while a step is already pending only marks it dirty (it will see the
  news: the step reads the store after it starts);
- a step woken by events starts no sooner than one step-duration after the
  previous one ended, so woken steps use at most half of the controller's time
  and the API the rest (a 0.1 s step: 0.1 s of delay; a 2 s one on a large
  backlog: 2 s, still well inside the interval a step runs on anyway).

Pure bookkeeping on a monotonic clock the caller passes in; ``Service`` applies
the answers to its scheduler.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class StepPacer:
    """``wake(now)`` / ``started(now)`` / ``finished(now)`` return when the step
    should run next (monotonic seconds), or ``None`` when nothing needs moving."""

    min_gap: float = 0.05  # seconds between the end of a step and a woken one
    _dirty: bool = False
    _running: bool = False
    _not_before: float = float("-inf")
    _started: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def wake(self, now: float) -> float | None:
        """Something happened. A time to bring the step forward to, or ``None`` when a
        step is already pending or running (it, or the re-run after it, sees this)."""
        with self._lock:
            if self._dirty:
                return None
            self._dirty = True
            if self._running:
                return None  # ``finished`` schedules the re-run
            return max(now, self._not_before)

    def started(self, now: float) -> None:
        """A step begins: it reads the store after this, so it sees every wake so far."""
        with self._lock:
            self._dirty, self._running = False, True
            self._started = now

    def finished(self, now: float) -> float | None:
        """A step ended; the time of the re-run when wakes arrived while it ran."""
        with self._lock:
            self._running = False
            took = max(0.0, now - self._started)
            self._not_before = now + max(self.min_gap, took)
            return self._not_before if self._dirty else None

    @property
    def pending(self) -> bool:
        return self._dirty
