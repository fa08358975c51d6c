"""AwsImdsWatcher against the IMDSv2 emulator: every payload, tokens, failures."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from spotfleet.agent.notices import AwsImdsWatcher, InstanceIdentity, start_watching
from spotfleet.clock import FakeClock
from spotfleet.metadata import AwsImdsServer
from spotfleet.model.events import InstanceEvent, NoticeKind

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)  # the conftest clock's start


@pytest.fixture
def watcher(imds: AwsImdsServer, clock: FakeClock) -> Iterator[AwsImdsWatcher]:
    with AwsImdsWatcher(imds.url, clock=clock, timeout=1.0, token_ttl=300, token_refresh=30) as w:
        yield w


def test_no_notice_no_event_and_identity_learned(watcher: AwsImdsWatcher) -> None:
    assert watcher.poll() == []
    assert watcher.poll() == []
    assert watcher.identity() == InstanceIdentity("i-0abc", "us-east-1b")
    assert watcher.stats.errors == 0


def test_spot_interruption_reported_exactly_once(
    watcher: AwsImdsWatcher, imds: AwsImdsServer, clock: FakeClock
) -> None:
    watcher.poll()
    imds.announce("spot", 120)
    [event] = watcher.poll()
    assert event.kind is NoticeKind.SPOT_INTERRUPTION
    assert event.deadline == START + timedelta(seconds=120)
    assert event.observed_at == START
    assert (event.provider, event.provider_instance_id, event.source) == ("aws", "i-0abc", "imds")
    assert event.detail == "action=terminate"
    assert watcher.poll() == []
    clock.advance(10)
    assert watcher.poll() == []  # still the same notice


def test_a_notice_that_goes_and_comes_back_is_new(
    watcher: AwsImdsWatcher, imds: AwsImdsServer, clock: FakeClock
) -> None:
    imds.announce("spot", 120)
    assert len(watcher.poll()) == 1
    imds.clear("spot")
    assert watcher.poll() == []
    clock.advance(30)
    imds.announce("spot", 120)
    [event] = watcher.poll()
    assert event.deadline == START + timedelta(seconds=150)


def test_a_changed_notice_is_new(watcher: AwsImdsWatcher, imds: AwsImdsServer) -> None:
    imds.announce("spot", 120, action="stop")
    [first] = watcher.poll()
    imds.announce("spot", 60, action="terminate")  # AWS may revise the action
    [second] = watcher.poll()
    assert first.detail == "action=stop" and second.detail == "action=terminate"
    assert second.deadline == START + timedelta(seconds=60)


@pytest.mark.parametrize("action", ["stop", "hibernate"])
def test_stop_and_hibernate_are_interruptions(watcher: AwsImdsWatcher, imds: AwsImdsServer, action: str) -> None:
    imds.announce("spot", 120, action=action)
    [event] = watcher.poll()
    assert event.kind is NoticeKind.SPOT_INTERRUPTION and event.detail == f"action={action}"


def test_rebalance_recommendation_is_soft(watcher: AwsImdsWatcher, imds: AwsImdsServer) -> None:
    imds.announce("rebalance")
    [event] = watcher.poll()
    assert event.kind is NoticeKind.REBALANCE
    assert event.deadline is None
    assert event.detail == "noticeTime=2026-03-01T12:00:00Z"
    assert watcher.poll() == []


def test_scheduled_maintenance(watcher: AwsImdsWatcher, imds: AwsImdsServer) -> None:
    imds.announce("maintenance", 7200, action="instance-retirement")
    [event] = watcher.poll()
    assert event.kind is NoticeKind.MAINTENANCE
    assert event.deadline == START + timedelta(hours=2)
    assert event.detail == "instance-retirement"
    assert watcher.poll() == []


def test_all_three_at_once(watcher: AwsImdsWatcher, imds: AwsImdsServer) -> None:
    imds.announce("rebalance")
    imds.announce("spot", 120)
    imds.announce("maintenance", 600)
    kinds = [e.kind for e in watcher.poll()]
    assert kinds == [NoticeKind.SPOT_INTERRUPTION, NoticeKind.REBALANCE, NoticeKind.MAINTENANCE]


def test_one_token_for_many_polls_refreshed_before_expiry(
    watcher: AwsImdsWatcher, imds: AwsImdsServer, clock: FakeClock
) -> None:
    for _ in range(5):
        watcher.poll()
    assert watcher.stats.token_fetches == 1
    clock.advance(300 - 30 - 1)  # just before the refresh point
    watcher.poll()
    assert watcher.stats.token_fetches == 1
    clock.advance(1)  # refresh point: 30 s before the server would expire it
    watcher.poll()
    assert watcher.stats.token_fetches == 2
    assert all(r.status != 401 for r in imds.request_log)


def test_token_revoked_early_is_refetched_without_losing_the_poll(watcher: AwsImdsWatcher, imds: AwsImdsServer) -> None:
    watcher.poll()
    imds.expire_tokens()
    imds.announce("spot", 120)
    [event] = watcher.poll()
    assert event.kind is NoticeKind.SPOT_INTERRUPTION
    assert watcher.stats.token_fetches == 2
    assert watcher.stats.errors == 0
    assert [r.status for r in imds.request_log if r.status == 401] == [401]


def test_token_expired_by_server_clock(imds: AwsImdsServer, clock: FakeClock) -> None:
    # A watcher that thinks its token lives longer than the server does (clock skew).
    with AwsImdsWatcher(imds.url, clock=FakeClock(START), timeout=0.3, token_ttl=60, token_refresh=0) as watcher:
        watcher.poll()
        clock.advance(61)  # the server's clock only
        imds.announce("rebalance")
        assert [e.kind for e in watcher.poll()] == [NoticeKind.REBALANCE]
        assert watcher.stats.token_fetches == 2


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_are_tolerated_and_nothing_is_lost(watcher: AwsImdsWatcher, imds: AwsImdsServer, status: int) -> None:
    watcher.poll()
    imds.announce("spot", 120)
    imds.faults.fail_next(3, status=status)
    results = [watcher.poll() for _ in range(3)]
    assert watcher.stats.errors >= 1
    assert f"HTTP {status}" in watcher.stats.last_error
    assert sum(len(r) for r in results) <= 1
    results.append(watcher.poll())
    assert sum(len(r) for r in results) == 1  # reported exactly once in all


def test_timeouts_are_tolerated(watcher: AwsImdsWatcher, imds: AwsImdsServer) -> None:
    watcher.poll()
    imds.faults.hang_next(1, seconds=3)
    assert watcher.poll() == []
    assert watcher.stats.errors == 1
    assert "Timeout" in watcher.stats.last_error
    imds.announce("spot", 120)
    assert len(watcher.poll()) == 1


def test_unreachable_endpoint_is_an_error_not_a_crash(clock: FakeClock) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        with AwsImdsWatcher(f"http://127.0.0.1:{port}", clock=clock, timeout=0.3) as watcher:
            assert watcher.poll() == []
            assert watcher.stats.errors == 1
            assert "ConnectError" in watcher.stats.last_error


def test_events_loop_waits_the_interval_with_the_injected_sleep(imds: AwsImdsServer, clock: FakeClock) -> None:
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)
        if len(sleeps) == 3:
            imds.announce("spot", 120)

    watcher = AwsImdsWatcher(imds.url, clock=clock, sleep=sleep, interval=1.0, timeout=0.3)
    events = watcher.events()
    event = next(events)
    watcher.close()
    assert list(events) == []
    assert sleeps == [1.0, 1.0, 1.0]
    assert event.observed_at == START + timedelta(seconds=3)
    assert event.deadline == START + timedelta(seconds=123)


def test_a_slow_round_shortens_the_next_wait(imds: AwsImdsServer) -> None:
    with AwsImdsWatcher(imds.url, interval=1.0, timeout=0.3) as watcher:  # the real clock
        watcher.poll()
        assert 0.5 < watcher.next_delay <= 1.0
        imds.faults.hang_next(1, seconds=3)
        watcher.poll()  # one request times out after 0.3 s
        assert watcher.next_delay <= 0.7


def test_start_watching_hands_events_to_the_agent(imds: AwsImdsServer) -> None:
    seen: list[InstanceEvent] = []
    got_one = threading.Event()

    def on_event(event: InstanceEvent) -> None:
        seen.append(event)
        got_one.set()

    watcher = AwsImdsWatcher(imds.url, interval=0.01, timeout=1.0)
    imds.announce("spot", 120)
    thread = start_watching(watcher, on_event)
    assert got_one.wait(timeout=10)
    watcher.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert [e.kind for e in seen] == [NoticeKind.SPOT_INTERRUPTION]
