"""GcpMetadataWatcher against the GCE metadata emulator."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from spotfleet.agent.notices import (
    AwsImdsWatcher,
    GcpMetadataWatcher,
    InstanceIdentity,
    watcher_for,
)
from spotfleet.clock import FakeClock
from spotfleet.errors import InvalidSpec
from spotfleet.metadata import GcpMetadataServer
from spotfleet.model.events import InstanceEvent, NoticeKind

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)  # the conftest clock's start


def until(predicate: Callable[[], bool], *, timeout: float = 5.0) -> None:
    give_up = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < give_up, "condition never became true"
        time.sleep(0.005)


@pytest.fixture
def watcher(gce: GcpMetadataServer, clock: FakeClock) -> Iterator[GcpMetadataWatcher]:
    with GcpMetadataWatcher(gce.url, clock=clock, wait_timeout=5, timeout=2.0) as w:
        yield w


def test_first_poll_answers_at_once_and_learns_identity(watcher: GcpMetadataWatcher, gce: GcpMetadataServer) -> None:
    started = time.monotonic()
    assert watcher.poll() == []
    assert time.monotonic() - started < 2
    assert watcher.identity() == InstanceIdentity("worker-1", "us-central1-a")
    assert gce.requests_to("/computeMetadata/v1/instance/preempted")


def test_preemption_reported_once_with_a_30s_deadline(
    watcher: GcpMetadataWatcher, gce: GcpMetadataServer, clock: FakeClock
) -> None:
    watcher.poll()
    clock.advance(7)
    gce.announce("spot")
    [event] = watcher.poll()  # last_etag differs: answers at once
    assert event.kind is NoticeKind.SPOT_INTERRUPTION
    assert event.deadline == START + timedelta(seconds=37)
    assert (event.provider, event.provider_instance_id, event.source) == ("gcp", "worker-1", "gce-metadata")
    with GcpMetadataWatcher(gce.url, clock=clock, wait_timeout=0.2) as other:
        assert len(other.poll()) == 1  # preempted before it started: reported on the first poll
        assert other.poll() == []  # and only once


def test_hanging_request_returns_the_moment_the_vm_is_preempted(
    watcher: GcpMetadataWatcher, gce: GcpMetadataServer
) -> None:
    watcher.poll()
    seen: list[InstanceEvent] = []
    poller = threading.Thread(target=lambda: seen.extend(watcher.poll()))
    poller.start()
    until(lambda: gce.waiting == 1)
    started = time.monotonic()
    gce.announce("spot")
    poller.join(timeout=5)
    assert time.monotonic() - started < 1
    assert [e.kind for e in seen] == [NoticeKind.SPOT_INTERRUPTION]


def test_wait_timeout_bounds_the_hang(gce: GcpMetadataServer, clock: FakeClock) -> None:
    with GcpMetadataWatcher(gce.url, clock=clock, wait_timeout=0.2) as watcher:
        watcher.poll()
        started = time.monotonic()
        assert watcher.poll() == []
        assert 0.15 < time.monotonic() - started < 2
        assert watcher.stats.errors == 0


def test_maintenance_events(watcher: GcpMetadataWatcher, gce: GcpMetadataServer) -> None:
    watcher.poll()
    gce.announce("maintenance", action="MIGRATE_ON_HOST_MAINTENANCE")
    gce.announce("spot")  # let the hanging request return
    events = watcher.poll()
    assert [e.kind for e in events] == [NoticeKind.SPOT_INTERRUPTION, NoticeKind.MAINTENANCE]
    assert events[1].deadline is None  # live migration: soft
    assert events[1].detail == "MIGRATE_ON_HOST_MAINTENANCE"
    gce.clear()
    assert watcher.poll() == []
    gce.announce("maintenance")
    gce.announce("spot")
    events = watcher.poll()
    assert events[1].detail == "TERMINATE_ON_HOST_MAINTENANCE"
    assert events[1].deadline == START + timedelta(seconds=60)


def test_503_backs_off_then_recovers_without_losing_the_notice(
    watcher: GcpMetadataWatcher, gce: GcpMetadataServer
) -> None:
    watcher.poll()
    gce.announce("spot")
    gce.faults.fail_next(4, status=503)
    delays = []
    for _ in range(4):
        assert watcher.poll() == []
        delays.append(watcher.next_delay)
    assert delays == [0.5, 1.0, 2.0, 4.0]
    assert watcher.stats.errors == 4 and "HTTP 503" in watcher.stats.last_error
    [event] = watcher.poll()
    assert event.kind is NoticeKind.SPOT_INTERRUPTION
    assert watcher.next_delay == 0.0


def test_backoff_is_capped(gce: GcpMetadataServer, clock: FakeClock) -> None:
    with GcpMetadataWatcher(gce.url, clock=clock, backoff_initial=1, backoff_max=3) as watcher:
        gce.faults.fail_next(5)
        for _ in range(5):
            watcher.poll()
        assert watcher.next_delay == 3


def test_timeout_is_an_error_with_backoff(gce: GcpMetadataServer, clock: FakeClock) -> None:
    with GcpMetadataWatcher(gce.url, clock=clock, wait_timeout=0.1, timeout=0.2) as watcher:
        gce.faults.hang_next(1, seconds=3)
        assert watcher.poll() == []
        assert "Timeout" in watcher.stats.last_error
        assert watcher.next_delay == 0.5


def test_events_loop_sleeps_only_to_back_off(gce: GcpMetadataServer, clock: FakeClock) -> None:
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)
        if len(sleeps) == 2:
            gce.announce("spot")

    watcher = GcpMetadataWatcher(gce.url, clock=clock, sleep=sleep, wait_timeout=5, timeout=2.0)
    gce.faults.fail_next(2)
    events = watcher.events()
    event = next(events)
    watcher.close()
    assert list(events) == []
    assert sleeps == [0.5, 1.0]
    assert event.observed_at == START + timedelta(seconds=1.5)


def test_watcher_for() -> None:
    aws = watcher_for("aws", "http://127.0.0.1:9", provider="local")
    gcp = watcher_for("gcp", "http://127.0.0.1:9")
    assert isinstance(aws, AwsImdsWatcher) and aws.provider == "local" and aws.interval == 1.0
    assert isinstance(gcp, GcpMetadataWatcher) and gcp.provider == "gcp"
    aws.__exit__(None, None, None)
    gcp.__exit__(None, None, None)
    with pytest.raises(InvalidSpec):
        watcher_for("azure", "http://127.0.0.1:9")
