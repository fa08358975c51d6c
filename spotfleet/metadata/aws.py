"""An emulated EC2 instance metadata service (IMDSv2, tokens required).

What it serves (as EC2 does, byte for byte where it matters to a client):

- ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds: 1..21600``
  returns a session token (400 without a valid TTL, 403 with ``X-Forwarded-For``).
- Every ``GET`` needs ``X-aws-ec2-metadata-token``: 401 when it is missing,
  unknown or expired (the emulated instance enforces ``HttpTokens=required``).
- ``/latest/meta-data/instance-id``, ``instance-type``,
  ``placement/availability-zone``, ``placement/region``.
- ``/latest/meta-data/spot/instance-action``: 404 until a spot notice, then
  ``{"action": "terminate|stop|hibernate", "time": "2026-01-01T00:02:00Z"}``;
  ``spot/termination-time`` (the legacy path) likewise.
- ``/latest/meta-data/events/recommendations/rebalance``: 404, then
  ``{"noticeTime": "..."}``.
- ``/latest/meta-data/events/maintenance/scheduled``: a JSON list of scheduled
  events (``[]`` when none), ``NotBefore`` in EC2's ``21 Jan 2026 09:00:43 GMT``.

Token expiry is read from the injected clock, so a test moves a ``FakeClock``
past the TTL instead of waiting.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import ClassVar

from spotfleet.clock import Clock
from spotfleet.metadata.base import MetadataServer, Request, Response, UnsupportedNotice, iso_z

TOKEN_PATH = "/latest/api/token"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
TERMINATION_TIME_PATH = "/latest/meta-data/spot/termination-time"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
MAINTENANCE_PATH = "/latest/meta-data/events/maintenance/scheduled"
MAX_TTL_SECONDS = 21600

SPOT_ACTIONS = ("terminate", "stop", "hibernate")
MAINTENANCE_CODES = ("instance-stop", "instance-retirement", "instance-reboot", "system-reboot", "system-maintenance")


def ec2_event_time(when: datetime) -> str:
    """EC2's scheduled-event time format: ``21 Jan 2026 09:00:43 GMT``."""
    return when.strftime("%d %b %Y %H:%M:%S GMT")


class AwsImdsServer(MetadataServer):
    """IMDSv2 for one emulated instance."""

    flavor: ClassVar[str] = "aws"
    default_notice_seconds: ClassVar[Mapping[str, float]] = {"spot": 120.0, "rebalance": 0.0, "maintenance": 3600.0}

    def __init__(
        self,
        *,
        instance_id: str,
        zone: str,
        instance_type: str = "p4d.24xlarge",
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(instance_id=instance_id, zone=zone, host=host, port=port, clock=clock)
        self.instance_type = instance_type
        self._tokens: dict[str, datetime] = {}
        self._instance_action: dict[str, str] | None = None
        self._rebalance: dict[str, str] | None = None
        self._maintenance: list[dict[str, str]] = []

    # -- notices -----------------------------------------------------------

    def _set_notice(self, kind: str, *, now: datetime, deadline: datetime, action: str | None) -> None:
        if kind == "spot":
            act = action or "terminate"
            if act not in SPOT_ACTIONS:
                raise UnsupportedNotice(f"unknown spot action {act!r}; use one of {', '.join(SPOT_ACTIONS)}")
            self._instance_action = {"action": act, "time": iso_z(deadline)}
        elif kind == "rebalance":
            self._rebalance = {"noticeTime": iso_z(now)}
        else:
            code = action or "instance-stop"
            if code not in MAINTENANCE_CODES:
                raise UnsupportedNotice(f"unknown maintenance code {code!r}; use one of {', '.join(MAINTENANCE_CODES)}")
            self._maintenance = [
                {
                    "Code": code,
                    "Description": f"The instance is scheduled for {code}",
                    "EventId": "instance-event-" + secrets.token_hex(8),
                    "NotBefore": ec2_event_time(deadline),
                    "NotAfter": ec2_event_time(deadline + timedelta(days=7)),
                    "State": "active",
                }
            ]

    def _clear_notice(self, kind: str) -> None:
        if kind == "spot":
            self._instance_action = None
        elif kind == "rebalance":
            self._rebalance = None
        else:
            self._maintenance = []

    def expire_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    # -- requests ----------------------------------------------------------

    def handle(self, request: Request) -> Response:
        if request.headers.get("X-Forwarded-For"):
            return Response.text(403, "Forbidden\n")
        if request.path == TOKEN_PATH:
            return self._token(request)
        if request.method not in ("GET", "HEAD"):
            return Response.text(405, "Method Not Allowed\n")
        token = request.headers.get(TOKEN_HEADER)
        now = self.clock.now()
        with self._lock:
            expires = self._tokens.get(token or "")
            if expires is None or expires <= now:
                return Response.text(401, "Unauthorized\n")
            return self._metadata(request.path)

    def _token(self, request: Request) -> Response:
        if request.method != "PUT":
            return Response.text(405, "Method Not Allowed\n")
        raw = request.headers.get(TTL_HEADER)
        try:
            ttl = int(raw) if raw is not None else 0
        except ValueError:
            ttl = 0
        if not 1 <= ttl <= MAX_TTL_SECONDS:
            return Response.text(400, "Bad Request\n")
        token = secrets.token_urlsafe(40)
        with self._lock:
            now = self.clock.now()
            self._tokens = {t: e for t, e in self._tokens.items() if e > now}
            self._tokens[token] = now + timedelta(seconds=ttl)
        return Response.text(200, token, {TTL_HEADER: str(ttl)})

    def _metadata(self, path: str) -> Response:
        """Answer a metadata GET (lock held)."""
        region = self.zone[:-1] if self.zone[-1:].isalpha() else self.zone
        static = {
            "/latest/meta-data/instance-id": self.instance_id,
            "/latest/meta-data/instance-type": self.instance_type,
            "/latest/meta-data/placement/availability-zone": self.zone,
            "/latest/meta-data/placement/region": region,
        }
        if path in static:
            return Response.text(200, static[path])
        if path == INSTANCE_ACTION_PATH and self._instance_action is not None:
            return Response.text(200, json.dumps(self._instance_action, separators=(",", ":")))
        if path == TERMINATION_TIME_PATH and self._instance_action is not None:
            return Response.text(200, self._instance_action["time"])
        if path == REBALANCE_PATH and self._rebalance is not None:
            return Response.text(200, json.dumps(self._rebalance, separators=(",", ":")))
        if path == MAINTENANCE_PATH:
            return Response.text(200, json.dumps(self._maintenance))
        return Response.text(404, "Not Found\n")
