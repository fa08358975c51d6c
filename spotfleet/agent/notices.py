"""Notice watchers: turn a cloud's metadata endpoint into ``InstanceEvent``s.

The node agent runs one watcher (``watcher_for(flavor, base_url)``) and hands
each event to ``NoticeDelivery`` (the jobs) and to the controller (the drain).
The same code runs against the real endpoints and the emulators in
``spotfleet.metadata``.

Contract of both watchers:

- ``poll()`` does one round of requests and returns the notices first seen in
  it. Each notice is reported **exactly once**: a notice that stays visible is
  not reported again; one that goes away (404, ``FALSE``, ``NONE``) and comes
  back is a new notice.
- Transient failures (timeouts, refused connections, 5xx, garbage bodies) never
  raise out of ``poll()``: they are counted in ``stats`` and logged once per
  streak, and the next round tries again.
- ``events()`` loops ``poll()`` until ``close()``, waiting with the injected
  ``sleep`` between rounds, so tests drive it with a fake clock and no real
  sleeping. ``next_delay`` says how long the loop will wait next.

Design choice (GCE): the watcher hangs on ``instance/preempted`` (the notice
with the shortest warning, about 30 s, so it is seen the moment it flips) and
reads ``instance/maintenance-event`` after each return of the hanging request
(GCE gives 60 s for host maintenance; ``wait_timeout`` bounds how late it is
seen). One connection, no threads, nothing missed between requests thanks to
``last_etag``.
"""

from __future__ import annotations

import abc
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, Self

import httpx

from spotfleet.clock import Clock, SystemClock
from spotfleet.errors import InvalidSpec
from spotfleet.model.events import InstanceEvent, NoticeKind

log = logging.getLogger(__name__)

Sleep = Callable[[float], object]

AWS_TOKEN_PATH = "/latest/api/token"
AWS_TOKEN_HEADER = "X-aws-ec2-metadata-token"
AWS_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_INSTANCE_ID_PATH = "/latest/meta-data/instance-id"
AWS_ZONE_PATH = "/latest/meta-data/placement/availability-zone"
AWS_INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
AWS_MAINTENANCE_PATH = "/latest/meta-data/events/maintenance/scheduled"

GCE_PREFIX = "/computeMetadata/v1/"
GCE_HEADERS = {"Metadata-Flavor": "Google"}


class TransientMetadataError(Exception):
    """One metadata request failed in a way the next round may not (internal)."""


@dataclass(slots=True)
class WatcherStats:
    polls: int = 0
    errors: int = 0
    token_fetches: int = 0
    events: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class InstanceIdentity:
    instance_id: str
    zone: str


class NoticeWatcher(Protocol):
    """What the agent needs from a watcher."""

    stats: WatcherStats

    def poll(self) -> list[InstanceEvent]: ...

    def events(self) -> Iterator[InstanceEvent]: ...

    def identity(self) -> InstanceIdentity | None: ...

    def close(self) -> None: ...


def parse_utc(text: str) -> datetime:
    """``2026-01-01T00:02:00Z`` (or any ISO-8601 with an offset) as aware UTC."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class _PollingWatcher(abc.ABC):
    """The loop, the stop flag and the error bookkeeping both watchers share."""

    source = ""

    def __init__(
        self,
        base_url: str,
        *,
        provider: str,
        instance_id: str | None,
        clock: Clock | None,
        sleep: Sleep | None,
        timeout: httpx.Timeout,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.provider = provider
        self.clock: Clock = clock or SystemClock()
        self.stats = WatcherStats()
        self.next_delay = 0.0
        self._closed = threading.Event()
        self._sleep: Sleep = sleep or self._closed.wait
        self._instance_id = instance_id
        self._zone = ""
        self._client = httpx.Client(base_url=base_url, timeout=timeout, transport=transport)
        self._failing = False

    # -- the loop ------------------------------------------------------------

    @abc.abstractmethod
    def poll(self) -> list[InstanceEvent]:
        """One round of requests; the notices first seen in it."""

    def events(self) -> Iterator[InstanceEvent]:
        """Poll until ``close()``; yields each notice once."""
        try:
            while not self._closed.is_set():
                yield from self.poll()
                if self._closed.is_set():
                    break
                if self.next_delay > 0:
                    self._sleep(self.next_delay)
        finally:
            self._client.close()

    def close(self) -> None:
        """Stop ``events()`` after the current round (safe from another thread)."""
        self._closed.set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._client.close()

    # -- helpers -------------------------------------------------------------

    def identity(self) -> InstanceIdentity | None:
        """This instance's id and zone, once the endpoint has told us."""
        if not self._instance_id:
            return None
        return InstanceIdentity(self._instance_id, self._zone)

    def _event(self, kind: NoticeKind, *, deadline: datetime | None, detail: str) -> InstanceEvent:
        self.stats.events += 1
        return InstanceEvent(
            provider=self.provider,
            provider_instance_id=self._instance_id or "",
            kind=kind,
            observed_at=self.clock.now(),
            deadline=deadline,
            source=self.source,
            detail=detail,
        )

    def _failed(self, error: TransientMetadataError) -> None:
        self.stats.errors += 1
        self.stats.last_error = str(error)
        if not self._failing:
            log.warning("%s metadata endpoint failing (will keep trying): %s", self.source, error)
        else:
            log.debug("%s metadata still failing: %s", self.source, error)
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            log.info("%s metadata endpoint answering again", self.source)
        self._failing = False

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:  # timeouts, refused, reset
            raise TransientMetadataError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500:
            raise TransientMetadataError(f"{method} {path}: HTTP {response.status_code}")
        return response


class AwsImdsWatcher(_PollingWatcher):
    """Polls IMDSv2 for spot interruption, rebalance and scheduled maintenance.

    Token flow: ``PUT /latest/api/token`` with a TTL, refreshed ``token_refresh``
    before it expires (by the injected clock); a 401 (token expired or revoked
    early) drops the token and retries the request once with a fresh one.
    """

    source = "imds"

    def __init__(
        self,
        base_url: str,
        *,
        provider: str = "aws",
        instance_id: str | None = None,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        interval: float = 1.0,
        timeout: float = 0.5,
        token_ttl: int = 21600,
        token_refresh: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            provider=provider,
            instance_id=instance_id,
            clock=clock,
            sleep=sleep,
            timeout=httpx.Timeout(timeout),
            transport=transport,
        )
        self.interval = interval
        self.next_delay = interval
        self.token_ttl = token_ttl
        self.token_refresh = min(token_refresh, token_ttl / 2)
        self._token: str | None = None
        self._token_expires: datetime | None = None
        self._spot_key: tuple[str, str] | None = None
        self._rebalance_key: str | None = None
        self._maintenance_keys: frozenset[str] = frozenset()

    def poll(self) -> list[InstanceEvent]:
        self.stats.polls += 1
        started = self.clock.now()
        events: list[InstanceEvent] = []
        try:
            if not self._instance_id:
                self._instance_id = self._get(AWS_INSTANCE_ID_PATH).text.strip()
                self._zone = self._get(AWS_ZONE_PATH).text.strip()
            events += self._check_spot()
            events += self._check_rebalance()
            events += self._check_maintenance()
        except TransientMetadataError as exc:
            self._failed(exc)
        else:
            self._recovered()
        # Keep the cadence: a slow round (a timeout) shortens the wait after it.
        spent = (self.clock.now() - started).total_seconds()
        self.next_delay = min(self.interval, max(0.0, self.interval - spent))
        return events

    # -- the three notices ---------------------------------------------------

    def _check_spot(self) -> list[InstanceEvent]:
        response = self._get(AWS_INSTANCE_ACTION_PATH, missing_ok=True)
        if response.status_code == 404:
            self._spot_key = None
            return []
        body = _json_object(response, AWS_INSTANCE_ACTION_PATH)
        action, when = str(body.get("action", "")), str(body.get("time", ""))
        deadline = _parsed(parse_utc, when, AWS_INSTANCE_ACTION_PATH)
        if self._spot_key == (action, when):
            return []
        self._spot_key = (action, when)
        return [self._event(NoticeKind.SPOT_INTERRUPTION, deadline=deadline, detail=f"action={action}")]

    def _check_rebalance(self) -> list[InstanceEvent]:
        response = self._get(AWS_REBALANCE_PATH, missing_ok=True)
        if response.status_code == 404:
            self._rebalance_key = None
            return []
        notice_time = str(_json_object(response, AWS_REBALANCE_PATH).get("noticeTime", ""))
        _parsed(parse_utc, notice_time, AWS_REBALANCE_PATH)
        if self._rebalance_key == notice_time:
            return []
        self._rebalance_key = notice_time
        return [self._event(NoticeKind.REBALANCE, deadline=None, detail=f"noticeTime={notice_time}")]

    def _check_maintenance(self) -> list[InstanceEvent]:
        response = self._get(AWS_MAINTENANCE_PATH, missing_ok=True)
        if response.status_code == 404:
            self._maintenance_keys = frozenset()
            return []
        try:
            scheduled = json.loads(response.text or "[]")
        except ValueError as exc:
            raise TransientMetadataError(f"{AWS_MAINTENANCE_PATH}: not JSON") from exc
        if not isinstance(scheduled, list):
            raise TransientMetadataError(f"{AWS_MAINTENANCE_PATH}: not a JSON list")
        events: list[InstanceEvent] = []
        keys: set[str] = set()
        for item in scheduled:
            if not isinstance(item, dict) or item.get("State", "active") != "active":
                continue
            key = str(item.get("EventId") or item.get("NotBefore"))
            keys.add(key)
            if key in self._maintenance_keys:
                continue
            deadline = _parsed(parsedate_to_datetime, str(item.get("NotBefore", "")), AWS_MAINTENANCE_PATH)
            events.append(
                self._event(NoticeKind.MAINTENANCE, deadline=deadline.astimezone(UTC), detail=str(item.get("Code", "")))
            )
        self._maintenance_keys = frozenset(keys)
        return events

    # -- token flow ----------------------------------------------------------

    def _get(self, path: str, *, missing_ok: bool = False) -> httpx.Response:
        for attempt in (1, 2):
            response = self._send("GET", path, headers={AWS_TOKEN_HEADER: self._ensure_token()})
            if response.status_code == 401 and attempt == 1:
                self._token = None  # expired or revoked before we expected: fetch a new one
                continue
            if response.status_code == 200 or (missing_ok and response.status_code == 404):
                return response
            raise TransientMetadataError(f"GET {path}: HTTP {response.status_code}")
        raise TransientMetadataError(f"GET {path}: still 401 with a fresh token")  # pragma: no cover

    def _ensure_token(self) -> str:
        now = self.clock.now()
        if self._token is not None and self._token_expires is not None and now < self._token_expires:
            return self._token
        response = self._send("PUT", AWS_TOKEN_PATH, headers={AWS_TTL_HEADER: str(self.token_ttl)})
        if response.status_code != 200 or not response.text.strip():
            raise TransientMetadataError(f"PUT {AWS_TOKEN_PATH}: HTTP {response.status_code}")
        self.stats.token_fetches += 1
        self._token = response.text.strip()
        ttl = float(response.headers.get(AWS_TTL_HEADER) or self.token_ttl)
        # Refresh this long before the server would expire it, so no request races the expiry.
        self._token_expires = now + timedelta(seconds=max(ttl - self.token_refresh, 0.0))
        return self._token


class GcpMetadataWatcher(_PollingWatcher):
    """Hangs on ``instance/preempted?wait_for_change=true``; reads maintenance.

    After a failure (503, timeout, refused) it waits ``backoff_initial`` and
    doubles up to ``backoff_max`` before reconnecting; the first success resets it.
    GCE gives no deadline with the notice: the deadline is when it was seen plus
    ``preemption_notice`` (30 s) or ``maintenance_notice`` (60 s).
    """

    source = "gce-metadata"

    def __init__(
        self,
        base_url: str,
        *,
        provider: str = "gcp",
        instance_id: str | None = None,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        wait_timeout: float = 10.0,
        timeout: float = 2.0,
        preemption_notice: float = 30.0,
        maintenance_notice: float = 60.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            provider=provider,
            instance_id=instance_id,
            clock=clock,
            sleep=sleep,
            timeout=httpx.Timeout(timeout, read=wait_timeout + timeout),
            transport=transport,
        )
        self.wait_timeout = wait_timeout
        self.preemption_notice = timedelta(seconds=preemption_notice)
        self.maintenance_notice = timedelta(seconds=maintenance_notice)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._backoff = 0.0
        self._preempted_etag: str | None = None
        self._preempted = False
        self._maintenance = "NONE"

    def poll(self) -> list[InstanceEvent]:
        self.stats.polls += 1
        events: list[InstanceEvent] = []
        try:
            if not self._instance_id:
                self._instance_id = self._get("instance/name").text.strip()
                self._zone = self._get("instance/zone").text.strip().rsplit("/", 1)[-1]
            events += self._check_preempted()
            events += self._check_maintenance()
        except TransientMetadataError as exc:
            self._failed(exc)
            self._backoff = min(self.backoff_max, self._backoff * 2 if self._backoff else self.backoff_initial)
            self.next_delay = self._backoff
            return events
        self._recovered()
        self._backoff = 0.0
        self.next_delay = 0.0  # the hanging request is the wait
        return events

    def _check_preempted(self) -> list[InstanceEvent]:
        params: dict[str, str] = {}
        if self._preempted_etag is not None:  # the first read answers at once: a VM preempted before we started
            params = {
                "wait_for_change": "true",
                "last_etag": self._preempted_etag,
                "timeout_sec": f"{self.wait_timeout:g}",
            }
        response = self._get("instance/preempted", params=params)
        value = response.text.strip().upper()
        if value not in ("TRUE", "FALSE"):
            raise TransientMetadataError(f"instance/preempted: unexpected value {value[:40]!r}")
        self._preempted_etag = response.headers.get("ETag")
        was, self._preempted = self._preempted, value == "TRUE"
        if self._preempted and not was:
            return [
                self._event(
                    NoticeKind.SPOT_INTERRUPTION,
                    deadline=self.clock.now() + self.preemption_notice,
                    detail="preempted=TRUE",
                )
            ]
        return []

    def _check_maintenance(self) -> list[InstanceEvent]:
        value = self._get("instance/maintenance-event").text.strip()
        was, self._maintenance = self._maintenance, value
        if value == was or value == "NONE":
            return []
        # Live migration keeps the VM (and the jobs): a soft notice without a deadline.
        deadline = None if value.startswith("MIGRATE") else self.clock.now() + self.maintenance_notice
        return [self._event(NoticeKind.MAINTENANCE, deadline=deadline, detail=value)]

    def _get(self, key: str, *, params: dict[str, str] | None = None) -> httpx.Response:
        response = self._send("GET", GCE_PREFIX + key, headers=GCE_HEADERS, params=params or {})
        if response.status_code != 200:
            raise TransientMetadataError(f"GET {key}: HTTP {response.status_code}")
        return response


def watcher_for(
    flavor: str,
    base_url: str,
    *,
    provider: str | None = None,
    instance_id: str | None = None,
    clock: Clock | None = None,
    sleep: Sleep | None = None,
) -> AwsImdsWatcher | GcpMetadataWatcher:
    """The watcher for a metadata flavor (``aws`` or ``gcp``) at ``base_url``.

    On a real instance ``base_url`` is ``http://169.254.169.254`` (AWS) or
    ``http://metadata.google.internal``; on a local fake instance it is its
    emulator's URL. ``provider`` names the provider in the events it yields
    (defaults to the flavor; the local provider passes ``local``).
    """
    if flavor == "aws":
        return AwsImdsWatcher(base_url, provider=provider or "aws", instance_id=instance_id, clock=clock, sleep=sleep)
    if flavor == "gcp":
        return GcpMetadataWatcher(
            base_url, provider=provider or "gcp", instance_id=instance_id, clock=clock, sleep=sleep
        )
    raise InvalidSpec("metadata", f"unknown metadata flavor {flavor!r}; use aws or gcp")


DEFAULT_BASE_URLS = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal"}


def start_watching(
    watcher: NoticeWatcher, on_event: Callable[[InstanceEvent], object], *, name: str = "notice-watcher"
) -> threading.Thread:
    """Run ``watcher.events()`` in a daemon thread, handing each event to ``on_event``.

    The agent wires it as ``start_watching(watcher, lambda e: agent.notice(kind=e.kind.value,
    deadline=e.deadline, source=e.source))``; ``watcher.close()`` ends the thread
    after the current round.
    """

    def loop() -> None:
        for event in watcher.events():
            on_event(event)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread


def _json_object(response: httpx.Response, path: str) -> dict[str, Any]:
    try:
        body = json.loads(response.text)
    except ValueError as exc:
        raise TransientMetadataError(f"{path}: not JSON: {response.text[:60]!r}") from exc
    if not isinstance(body, dict):
        raise TransientMetadataError(f"{path}: not a JSON object")
    return body


def _parsed(parse: Callable[[str], datetime], text: str, path: str) -> datetime:
    try:
        return parse(text)
    except (TypeError, ValueError) as exc:
        raise TransientMetadataError(f"{path}: bad time {text[:40]!r}") from exc
