"""Controller-side preemption backstop for GCP: operations and statuses → events.

The node agent's metadata watcher sees a preemption ~30 s ahead; this catches the
ones it missed (agent dead, VM wedged) from what the API reports:

- a zone operation ``compute.instances.preempted`` targeting one of this
  cluster's VMs (recognised by name prefix, because with termination action
  DELETE the VM and its labels are gone by the time we look) →
  ``SPOT_INTERRUPTION`` with ``deadline = insertTime + notice``;
- a VM of ours whose status is ``TERMINATED``/``STOPPED``, or that vanished
  from the list since the last poll → ``TERMINATED``.

``EventTracker`` is pure bookkeeping (no I/O) so it can be tested alone. It
de-duplicates by operation id and by (instance, kind), and forgets keys after
``memory`` so a long-running controller does not grow without bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from google.cloud import compute_v1

from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.providers.base import CloudState, ProviderInstance
from spotfleet.providers.gcp_resources import PROVIDER, provider_id

PREEMPTED = "compute.instances.preempted"
PREEMPTED_FILTER = f'operationType = "{PREEMPTED}"'


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


class EventTracker:
    """Turns successive observations into de-duplicated ``InstanceEvent`` s."""

    def __init__(self, *, name_prefix: str, notice: timedelta, memory: timedelta = timedelta(hours=24)) -> None:
        self._prefix = name_prefix
        self._notice = notice
        self._memory = memory
        self._seen: dict[tuple[str, str], datetime] = {}  # (provider_id | op id, kind) -> first seen
        self._known: set[str] = set()

    def remember(self, provider_ids: Iterable[str]) -> None:
        """Instances we launched or listed (so their disappearance is noticed)."""
        self._known.update(provider_ids)

    def knows(self, pid: str) -> bool:
        """Listed or launched by us, now or before it was seen to go away."""
        return pid in self._known or (pid, NoticeKind.TERMINATED.value) in self._seen

    def _first(self, key: tuple[str, str], now: datetime) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = now
        return True

    def from_operations(
        self, zone: str, operations: Iterable[compute_v1.Operation], now: datetime
    ) -> list[InstanceEvent]:
        events = []
        for op in operations:
            name = op.target_link.rsplit("/", 1)[-1]
            if op.operation_type != PREEMPTED or not name.startswith(self._prefix):
                continue
            started = _parse_time(op.insert_time) or now
            if started < now - self._memory:  # older than what we remember: already reported
                continue
            if not self._first((str(op.id) or op.name, "op"), now):
                continue
            pid = provider_id(zone, name)
            events.append(
                InstanceEvent(
                    provider=PROVIDER,
                    provider_instance_id=pid,
                    kind=NoticeKind.SPOT_INTERRUPTION,
                    observed_at=now,
                    deadline=started + self._notice,
                    source="gce-operation",
                    detail=f"{PREEMPTED} {op.name}",
                )
            )
        return events

    def from_instances(self, instances: Iterable[ProviderInstance], now: datetime) -> list[InstanceEvent]:
        current = {i.provider_id: i for i in instances}
        events = []
        for pid, inst in current.items():
            if inst.state is CloudState.TERMINATED and self._first((pid, NoticeKind.TERMINATED.value), now):
                events.append(self._terminated(pid, now, "status TERMINATED"))
        for pid in sorted(self._known - current.keys()):
            if self._first((pid, NoticeKind.TERMINATED.value), now):
                events.append(self._terminated(pid, now, "no longer listed (deleted)"))
        self._known = set(current)
        self._forget(now)
        return events

    def _terminated(self, pid: str, now: datetime, detail: str) -> InstanceEvent:
        return InstanceEvent(
            provider=PROVIDER,
            provider_instance_id=pid,
            kind=NoticeKind.TERMINATED,
            observed_at=now,
            source="gce-api",
            detail=detail,
        )

    def _forget(self, now: datetime) -> None:
        cutoff = now - self._memory
        for key in [k for k, t in self._seen.items() if t < cutoff]:
            del self._seen[key]
