"""Injectable clocks.

Nothing in spotfleet reads the wall clock directly: the controller, the agent's
timers and every policy take a ``Clock``. Tests and the simulator use
``FakeClock`` and move time by hand, so no test sleeps to wait for a policy.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the only wall-clock read)."""
    return datetime.now(UTC)


class Clock(Protocol):
    def now(self) -> datetime:
        """Current time, timezone-aware UTC."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return utcnow()


class FakeClock:
    """A clock that only moves when told to (thread-safe)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0.0, **kwargs: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds, **kwargs)
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when
