"""Deliver notices to the jobs on a node: notice file, signal, escalation.

On a notice, for each job: write the notice JSON atomically to the job's
``SPOTFLEET_NOTICE_FILE``, then send the job's checkpoint signal (default
``SIGUSR1``) to its process group. A job that is still running when the
escalation times come gets ``SIGTERM``, then ``SIGKILL``:

::

    notice ──────────── SIGTERM ──── SIGKILL ──── deadline (the cloud takes it)
           the job saves   │  margin/2  │  margin/2  │
                     deadline − margin         deadline − margin/2

``margin`` is the job's ``checkpoint.grace`` (10 s by default), capped at half
the time left when the notice arrived, so a short notice still leaves the job
half of it to save. A soft notice (rebalance, live migration: no deadline) only
writes the file and signals; the job saves and carries on.

Periodic checkpoints (``checkpoint.interval``): tracked jobs with an interval
are signalled on schedule with a notice of kind ``checkpoint`` (``exit: false``)
until a notice with a deadline arrives for them.

Design choice: nothing here sleeps or reads the wall clock. The agent loop calls
``tick(now)`` (every second, and right after ``deliver``); tests drive it with a
``FakeClock`` and real child processes.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from spotfleet.checkpoint import PERIODIC_KIND, write_atomic
from spotfleet.clock import Clock
from spotfleet.model.events import InstanceEvent, NoticeKind

log = logging.getLogger(__name__)

Kill = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class JobTarget:
    """One job process (group) on this node and how to reach it."""

    job_id: str
    pgid: int
    notice_file: Path
    is_running: Callable[[], bool]
    signal: signal.Signals = signal.SIGUSR1
    grace: timedelta = timedelta(seconds=10)
    interval: timedelta | None = None  # periodic checkpoints

    @classmethod
    def for_process(
        cls,
        job_id: str,
        process: subprocess.Popen[Any],
        *,
        notice_file: Path,
        signal_name: str = "SIGUSR1",
        grace: timedelta = timedelta(seconds=10),
        interval: timedelta | None = None,
    ) -> JobTarget:
        """A job the agent started in its own process group (``process_group=0``
        or ``start_new_session=True``), so its group id is its pid."""
        return cls(
            job_id=job_id,
            pgid=process.pid,
            notice_file=notice_file,
            is_running=lambda: process.poll() is None,
            signal=signal.Signals[signal_name],
            grace=grace,
            interval=interval,
        )


class Phase(enum.StrEnum):
    SIGNALLED = "signalled"  # notice written, checkpoint signal sent
    TERMINATING = "terminating"  # SIGTERM sent
    KILLED = "killed"  # SIGKILL sent
    EXITED = "exited"  # the job's processes are gone


class ActionKind(enum.StrEnum):
    NOTICE = "notice"  # notice file written and checkpoint signal sent
    PERIODIC = "periodic"  # periodic checkpoint requested
    SIGTERM = "sigterm"
    SIGKILL = "sigkill"
    EXITED = "exited"  # the job left before (or after) escalation


@dataclass(frozen=True, slots=True)
class DeliveryAction:
    """Something ``NoticeDelivery`` did, for the agent's log and heartbeat."""

    job_id: str
    kind: ActionKind
    at: datetime
    notice_kind: str = ""


@dataclass(slots=True)
class Delivery:
    """A notice delivered to one job and its escalation schedule."""

    target: JobTarget
    event: InstanceEvent
    delivered_at: datetime
    sigterm_at: datetime | None
    sigkill_at: datetime | None
    phase: Phase = Phase.SIGNALLED
    history: list[DeliveryAction] = field(default_factory=list)

    @property
    def hard(self) -> bool:
        return self.sigterm_at is not None

    @property
    def done(self) -> bool:
        return self.phase is Phase.EXITED or (not self.hard and self.phase is Phase.SIGNALLED)


def escalation_times(*, now: datetime, deadline: datetime, grace: timedelta) -> tuple[datetime, datetime]:
    """When to send SIGTERM and SIGKILL for a notice seen at ``now``."""
    window = max(deadline - now, timedelta(0))
    margin = min(grace, window / 2)
    return deadline - margin, deadline - margin / 2


def notice_payload(event: InstanceEvent, *, now: datetime) -> dict[str, Any]:
    """The JSON the job reads from its notice file for a cloud notice."""
    exit_after = event.deadline is not None and event.kind is not NoticeKind.REBALANCE
    return _notice_json(
        event.kind.value,
        deadline=event.deadline,
        now=now,
        exit_after=exit_after,
        source=event.source,
        detail=event.detail,
    )


def _notice_json(
    kind: str, *, deadline: datetime | None, now: datetime, exit_after: bool, source: str, detail: str
) -> dict[str, Any]:
    return {
        "kind": kind,
        "deadline": _iso(deadline) if deadline else None,
        "seconds_left": round((deadline - now).total_seconds(), 3) if deadline else None,
        "exit": exit_after,
        "issued_at": _iso(now),
        "source": source,
        "detail": detail,
    }


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


class NoticeDelivery:
    """Notices, signals and escalation for the jobs on one node.

    Not thread-safe: call ``track``, ``deliver`` and ``tick`` from one thread
    (normally the agent loop, which a watcher thread hands its events to).
    """

    def __init__(self, *, clock: Clock, kill: Kill = os.killpg) -> None:
        self.clock = clock
        self._kill = kill
        self._jobs: dict[str, JobTarget] = {}
        self._next_periodic: dict[str, datetime] = {}
        self._deliveries: dict[str, Delivery] = {}

    # -- the jobs on this node -------------------------------------------------

    def track(self, target: JobTarget) -> None:
        """A job started on this node (periodic checkpoints start counting now)."""
        self._jobs[target.job_id] = target
        if target.interval:
            self._next_periodic[target.job_id] = self.clock.now() + target.interval

    def untrack(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._next_periodic.pop(job_id, None)
        self._deliveries.pop(job_id, None)

    def delivery(self, job_id: str) -> Delivery | None:
        return self._deliveries.get(job_id)

    @property
    def deliveries(self) -> list[Delivery]:
        return list(self._deliveries.values())

    # -- notices ---------------------------------------------------------------

    def deliver(self, event: InstanceEvent, targets: Iterable[JobTarget] | None = None) -> list[DeliveryAction]:
        """Tell each job (default: every tracked job) about ``event``.

        Idempotent: a job that already has a notice is only told again when the
        new one is more urgent (a deadline where there was none, or an earlier
        deadline); duplicates and softer notices are ignored.
        """
        now = self.clock.now()
        actions: list[DeliveryAction] = []
        for target in list(self._jobs.values()) if targets is None else list(targets):
            self._jobs.setdefault(target.job_id, target)
            current = self._deliveries.get(target.job_id)
            if current is not None and not _more_urgent(event, than=current.event):
                continue
            sigterm_at = sigkill_at = None
            if event.deadline is not None and event.kind is not NoticeKind.REBALANCE:
                sigterm_at, sigkill_at = escalation_times(now=now, deadline=event.deadline, grace=target.grace)
            delivery = Delivery(target, event, now, sigterm_at, sigkill_at)
            self._deliveries[target.job_id] = delivery
            if delivery.hard:
                self._next_periodic.pop(target.job_id, None)  # no more periodic requests: it is leaving
            write_atomic(target.notice_file, json.dumps(notice_payload(event, now=now)).encode(), durable=False)
            sent = self._signal(target, target.signal)
            action = DeliveryAction(
                target.job_id, ActionKind.NOTICE if sent else ActionKind.EXITED, now, event.kind.value
            )
            if not sent:
                delivery.phase = Phase.EXITED
            delivery.history.append(action)
            actions.append(action)
        return actions

    def tick(self, now: datetime | None = None) -> list[DeliveryAction]:
        """Escalate overdue jobs, notice exits, send periodic checkpoint requests."""
        now = now or self.clock.now()
        actions: list[DeliveryAction] = []
        for delivery in list(self._deliveries.values()):
            action = self._escalate(delivery, now)
            if action is not None:
                delivery.history.append(action)
                actions.append(action)
        for job_id, due in list(self._next_periodic.items()):
            target = self._jobs[job_id]
            if now < due or target.interval is None:
                continue
            self._next_periodic[job_id] = now + target.interval
            if not target.is_running():
                continue
            payload = _notice_json(
                PERIODIC_KIND, deadline=None, now=now, exit_after=False, source="agent", detail="periodic"
            )
            write_atomic(target.notice_file, json.dumps(payload).encode(), durable=False)
            if self._signal(target, target.signal):
                actions.append(DeliveryAction(job_id, ActionKind.PERIODIC, now, PERIODIC_KIND))
        return actions

    def _escalate(self, delivery: Delivery, now: datetime) -> DeliveryAction | None:
        if delivery.done or delivery.phase is Phase.EXITED:
            return None
        target = delivery.target
        if not target.is_running():
            delivery.phase = Phase.EXITED
            return DeliveryAction(target.job_id, ActionKind.EXITED, now, delivery.event.kind.value)
        if delivery.sigkill_at is not None and now >= delivery.sigkill_at and delivery.phase is not Phase.KILLED:
            log.warning("job %s still running %s before the reclaim: SIGKILL", target.job_id, delivery.event.deadline)
            delivery.phase = Phase.KILLED if self._signal(target, signal.SIGKILL) else Phase.EXITED
            return DeliveryAction(target.job_id, ActionKind.SIGKILL, now, delivery.event.kind.value)
        if delivery.sigterm_at is not None and now >= delivery.sigterm_at and delivery.phase is Phase.SIGNALLED:
            log.warning("job %s did not exit after the notice: SIGTERM", target.job_id)
            delivery.phase = Phase.TERMINATING if self._signal(target, signal.SIGTERM) else Phase.EXITED
            return DeliveryAction(target.job_id, ActionKind.SIGTERM, now, delivery.event.kind.value)
        return None

    def _signal(self, target: JobTarget, signum: signal.Signals) -> bool:
        """Signal the job's process group; False when it is already gone."""
        try:
            self._kill(target.pgid, signum)
        except ProcessLookupError:
            return False
        return True


def _more_urgent(event: InstanceEvent, *, than: InstanceEvent) -> bool:
    if event.deadline is None or event.kind is NoticeKind.REBALANCE:
        return False  # a soft notice never replaces one already delivered
    if than.deadline is None or than.kind is NoticeKind.REBALANCE:
        return True
    return event.deadline < than.deadline
