"""An emulated GCE metadata server.

What it serves (as GCE does, where it matters to a client):

- Every request needs ``Metadata-Flavor: Google`` (403 without it, and with
  ``X-Forwarded-For``); every answer carries ``Metadata-Flavor: Google`` and an
  ``ETag`` (a hash of the value, so an unchanged value keeps its ETag).
- ``/computeMetadata/v1/instance/id``, ``instance/name``, ``instance/hostname``,
  ``instance/zone`` (``projects/NUMBER/zones/ZONE``), ``project/project-id``.
- ``instance/preempted``: ``FALSE``, then ``TRUE`` once the VM is being preempted.
- ``instance/maintenance-event``: ``NONE``, ``MIGRATE_ON_HOST_MAINTENANCE`` or
  ``TERMINATE_ON_HOST_MAINTENANCE``.
- ``?wait_for_change=true`` hangs until the value changes and then answers with
  the new value; with ``last_etag=E`` it answers at once if the value's ETag is
  no longer ``E`` (so no change between two requests is missed); with
  ``timeout_sec=N`` it answers with the unchanged value after N seconds.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import ClassVar

from spotfleet.clock import Clock
from spotfleet.metadata.base import MetadataServer, Request, Response, UnsupportedNotice

PREFIX = "/computeMetadata/v1/"
PREEMPTED_KEY = "instance/preempted"
MAINTENANCE_KEY = "instance/maintenance-event"
MAINTENANCE_EVENTS = ("MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE")
MAX_WAIT_SECONDS = 300.0  # a hanging request without timeout_sec is answered after this
_FLAVOR_HEADERS = {"Metadata-Flavor": "Google", "Content-Type": "application/text"}


def etag_of(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


class GcpMetadataServer(MetadataServer):
    """The GCE metadata server of one emulated VM."""

    flavor: ClassVar[str] = "gcp"
    default_notice_seconds: ClassVar[Mapping[str, float]] = {"spot": 30.0, "maintenance": 60.0, "rebalance": 0.0}

    def __init__(
        self,
        *,
        instance_id: str,
        zone: str,
        name: str | None = None,
        project_id: str = "spotfleet-local",
        project_number: str = "123456789012",
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(instance_id=instance_id, zone=zone, host=host, port=port, clock=clock)
        self._changed = threading.Condition(self._lock)
        self._static = {
            "instance/id": instance_id,
            "instance/name": name or instance_id,
            "instance/hostname": f"{name or instance_id}.{zone}.c.{project_id}.internal",
            "instance/zone": f"projects/{project_number}/zones/{zone}",
            "project/project-id": project_id,
            "project/numeric-project-id": project_number,
        }
        self._dynamic = {PREEMPTED_KEY: "FALSE", MAINTENANCE_KEY: "NONE"}
        self.waiting = 0  # requests hanging in wait_for_change right now (tests wait on it)

    # -- notices -----------------------------------------------------------

    def _set_notice(self, kind: str, *, now: datetime, deadline: datetime, action: str | None) -> None:
        if kind == "spot":
            self._dynamic[PREEMPTED_KEY] = "TRUE"
        elif kind == "maintenance":
            event = action or "TERMINATE_ON_HOST_MAINTENANCE"
            if event not in MAINTENANCE_EVENTS:
                raise UnsupportedNotice(
                    f"unknown maintenance event {event!r}; use one of {', '.join(MAINTENANCE_EVENTS)}"
                )
            self._dynamic[MAINTENANCE_KEY] = event
        else:
            raise UnsupportedNotice(f"GCE has no {kind} notice; use spot or maintenance")

    def _clear_notice(self, kind: str) -> None:
        if kind == "spot":
            self._dynamic[PREEMPTED_KEY] = "FALSE"
        elif kind == "maintenance":
            self._dynamic[MAINTENANCE_KEY] = "NONE"

    def _wake_waiters(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # -- requests ----------------------------------------------------------

    def handle(self, request: Request) -> Response:
        if request.headers.get("Metadata-Flavor") != "Google" or request.headers.get("X-Forwarded-For"):
            return Response.text(403, "Missing required header: Metadata-Flavor: Google\n", _FLAVOR_HEADERS)
        if request.method not in ("GET", "HEAD"):
            return Response.text(405, "Method Not Allowed\n", _FLAVOR_HEADERS)
        if not request.path.startswith(PREFIX):
            return Response.text(404, "Not Found\n", _FLAVOR_HEADERS)
        key = request.path[len(PREFIX) :].rstrip("/")
        if key not in self._static and key not in self._dynamic:
            return Response.text(404, "Not Found\n", _FLAVOR_HEADERS)
        if request.query.get("wait_for_change", "").lower() == "true":
            value = self._wait_for_change(key, request.query)
        else:
            with self._lock:
                value = self._value(key)
        return Response.text(200, value, {**_FLAVOR_HEADERS, "ETag": etag_of(value)})

    def _value(self, key: str) -> str:
        return self._dynamic.get(key) or self._static[key]

    def _wait_for_change(self, key: str, query: Mapping[str, str]) -> str:
        try:
            timeout = min(float(query.get("timeout_sec") or MAX_WAIT_SECONDS), MAX_WAIT_SECONDS)
        except ValueError:
            timeout = MAX_WAIT_SECONDS
        give_up = time.monotonic() + max(timeout, 0.0)
        with self._changed:
            baseline = query.get("last_etag") or etag_of(self._value(key))
            self.waiting += 1
            try:
                while etag_of(self._value(key)) == baseline and not self._stopping.is_set():
                    left = give_up - time.monotonic()
                    if left <= 0:
                        break
                    self._changed.wait(left)
            finally:
                self.waiting -= 1
            return self._value(key)
