"""What the AWS and GCE metadata emulators share: the threaded HTTP server, the
control endpoint, fault injection and the notice bookkeeping.

Design choice: the emulators are real HTTP servers on loopback, not fakes behind
the watcher's interface, so the bytes the watcher parses in a test are the bytes
it parses on an instance (status codes, headers, ETags, hanging requests). A
flavor subclass only maps a request to a response; everything a test or another
process needs to steer it (announce a notice, fail the next requests, hang,
expire tokens) lives here, once.

Control endpoint (never subject to injected faults)::

    POST /_spotfleet/notice  {"kind": "spot|rebalance|maintenance", "notice_seconds": 120, "action": "terminate"}
    POST /_spotfleet/clear   {"kind": "spot"}            (no kind: clear every notice)
    POST /_spotfleet/faults  {"fail_next": 3, "status": 503, "hang_next": 1, "hang_seconds": 5,
                              "expire_tokens": true}
    GET  /_spotfleet/state
"""

from __future__ import annotations

import abc
import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self
from urllib.parse import parse_qs, urlsplit

from spotfleet.clock import Clock, SystemClock
from spotfleet.errors import SpotfleetError

CONTROL_PREFIX = "/_spotfleet/"
ANNOUNCE_KINDS = ("spot", "rebalance", "maintenance")


class UnsupportedNotice(SpotfleetError):
    """The flavor has no such notice (GCE has no rebalance recommendation)."""


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed HTTP request, as a flavor handler sees it."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Message
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, status: int, text: str, headers: Mapping[str, str] | None = None) -> Response:
        merged = {"Content-Type": "text/plain", **(headers or {})}
        return cls(status, text.encode(), merged)

    @classmethod
    def json(cls, status: int, data: Any) -> Response:
        return cls(status, json.dumps(data).encode(), {"Content-Type": "application/json"})


@dataclass(frozen=True, slots=True)
class Fault:
    """What to do to one metadata request instead of answering it."""

    status: int | None = None  # answer with this status (5xx) ...
    hang_seconds: float | None = None  # ... or hold the request this long, then drop it


class FaultPlan:
    """Faults for the next N metadata requests, consumed in order (thread-safe)."""

    def __init__(self) -> None:
        self._queue: deque[Fault] = deque()
        self._lock = threading.Lock()

    def fail_next(self, count: int = 1, *, status: int = 503) -> None:
        with self._lock:
            self._queue.extend(Fault(status=status) for _ in range(count))

    def hang_next(self, count: int = 1, *, seconds: float = 5.0) -> None:
        with self._lock:
            self._queue.extend(Fault(hang_seconds=seconds) for _ in range(count))

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()

    def take(self) -> Fault | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    method: str
    path: str
    status: int  # 0 when the request was dropped (hang fault)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: MetadataServer) -> None:
        self.app = app
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real endpoints
    timeout = 60  # idle keep-alive connections are dropped after this
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log; requests go to ``request_log``."""

    def _handle(self) -> None:
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Request(self.command, split.path, query, self.headers, body)
        response = self.server.app.dispatch(request)
        if response is None:  # a hang fault: drop the connection without answering
            self.close_connection = True
            return
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle


def iso_z(when: datetime) -> str:
    """``2026-01-01T00:02:00Z``: the timestamp format both clouds use."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class MetadataServer(abc.ABC):
    """An emulated metadata endpoint in a background thread.

    ``announce(kind, notice_seconds)`` makes the endpoint report a notice from now
    on; ``clear()`` withdraws it. ``announced_at[kind]`` is the wall time
    (``time.time()``) of the last announce, for latency measurements.
    """

    flavor: ClassVar[str]
    default_notice_seconds: ClassVar[Mapping[str, float]]

    def __init__(
        self,
        *,
        instance_id: str,
        zone: str,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self.instance_id = instance_id
        self.zone = zone
        self.clock: Clock = clock or SystemClock()
        self.faults = FaultPlan()
        self.request_log: deque[LoggedRequest] = deque(maxlen=10_000)
        self.announced_at: dict[str, float] = {}
        self.deadlines: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._address = (host, port)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Self:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer(self._address, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.flavor}-metadata-{self.instance_id}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; hanging requests are released at once."""
        self._stopping.set()
        self._wake_waiters()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("metadata server not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234`` (what the watcher is given)."""
        return f"http://{self._address[0]}:{self.port}"

    # -- notices -----------------------------------------------------------

    def announce(self, kind: str, notice_seconds: float | None = None, *, action: str | None = None) -> datetime:
        """Start reporting a notice of ``kind`` (spot, rebalance, maintenance).

        Returns the deadline: when the cloud would take the instance back (for a
        rebalance recommendation, which has none, the time it was issued).
        Raises ``UnsupportedNotice`` for a kind or action this flavor lacks.
        """
        if kind not in ANNOUNCE_KINDS:
            raise UnsupportedNotice(f"unknown notice kind {kind!r}; use one of {', '.join(ANNOUNCE_KINDS)}")
        seconds = self.default_notice_seconds[kind] if notice_seconds is None else float(notice_seconds)
        if seconds < 0:
            raise UnsupportedNotice("notice_seconds cannot be negative")
        now = self.clock.now()
        deadline = now + timedelta(seconds=seconds)
        with self._lock:
            self._set_notice(kind, now=now, deadline=deadline, action=action)
            self.deadlines[kind] = deadline
            self.announced_at[kind] = time.time()
        self._wake_waiters()
        return deadline

    def clear(self, kind: str | None = None) -> None:
        """Withdraw one notice, or all of them."""
        kinds = ANNOUNCE_KINDS if kind is None else (kind,)
        with self._lock:
            for k in kinds:
                if k not in ANNOUNCE_KINDS:
                    raise UnsupportedNotice(f"unknown notice kind {k!r}")
                self._clear_notice(k)
                self.deadlines.pop(k, None)
        self._wake_waiters()

    def expire_tokens(self) -> None:
        """Invalidate every session token issued so far (a no-op without tokens)."""
        return None

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "flavor": self.flavor,
                "instance_id": self.instance_id,
                "zone": self.zone,
                "notices": {k: iso_z(v) for k, v in self.deadlines.items()},
                "pending_faults": self.faults.pending,
            }

    # -- flavor hooks ------------------------------------------------------

    @abc.abstractmethod
    def _set_notice(self, kind: str, *, now: datetime, deadline: datetime, action: str | None) -> None:
        """Record the notice (called with the lock held)."""

    @abc.abstractmethod
    def _clear_notice(self, kind: str) -> None:
        """Withdraw the notice (called with the lock held)."""

    @abc.abstractmethod
    def handle(self, request: Request) -> Response:
        """Answer one metadata request (not a control request)."""

    def _wake_waiters(self) -> None:
        """Release requests waiting for a change (GCE ``wait_for_change``)."""
        return None

    # -- dispatch ----------------------------------------------------------

    def dispatch(self, request: Request) -> Response | None:
        """Route one request; ``None`` means drop the connection unanswered."""
        if request.path.startswith(CONTROL_PREFIX):
            response = self._control(request)
        else:
            fault = self.faults.take()
            if fault is not None and fault.hang_seconds is not None:
                self._stopping.wait(fault.hang_seconds)
                self.request_log.append(LoggedRequest(request.method, request.path, 0))
                return None
            if fault is not None and fault.status is not None:
                response = Response.text(fault.status, "injected fault\n")
            else:
                response = self.handle(request)
        self.request_log.append(LoggedRequest(request.method, request.path, response.status))
        return response

    def requests_to(self, path: str) -> list[LoggedRequest]:
        return [r for r in list(self.request_log) if r.path == path]

    def _control(self, request: Request) -> Response:
        action = request.path[len(CONTROL_PREFIX) :]
        if request.method == "GET" and action == "state":
            return Response.json(200, self.state())
        if request.method != "POST":
            return Response.json(405, {"error": "use POST"})
        try:
            payload = json.loads(request.body or b"{}")
        except ValueError:
            return Response.json(400, {"error": "body must be JSON"})
        if not isinstance(payload, dict):
            return Response.json(400, {"error": "body must be a JSON object"})
        try:
            if action == "notice":
                deadline = self.announce(
                    str(payload.get("kind", "spot")),
                    _optional_float(payload.get("notice_seconds")),
                    action=payload.get("action"),
                )
                return Response.json(200, {"deadline": iso_z(deadline), **self.state()})
            if action == "clear":
                kind = payload.get("kind")
                self.clear(None if kind is None else str(kind))
                return Response.json(200, self.state())
            if action == "faults":
                self._apply_faults(payload)
                return Response.json(200, self.state())
        except (UnsupportedNotice, TypeError, ValueError) as exc:
            return Response.json(400, {"error": str(exc)})
        return Response.json(404, {"error": f"unknown control action {action!r}"})

    def _apply_faults(self, payload: Mapping[str, Any]) -> None:
        if payload.get("fail_next"):
            self.faults.fail_next(int(payload["fail_next"]), status=int(payload.get("status", 503)))
        if payload.get("hang_next"):
            self.faults.hang_next(int(payload["hang_next"]), seconds=float(payload.get("hang_seconds", 5.0)))
        if payload.get("expire_tokens"):
            self.expire_tokens()
        if payload.get("clear"):
            self.faults.clear()


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
