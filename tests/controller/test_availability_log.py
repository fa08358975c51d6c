"""AvailabilityLog: time-weighted spot availability per pool and per market, with run lengths."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from spotfleet.controller.availability import AvailabilityLog
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import spot_market_key
from tests.policies.builders import T0, offering

A = offering("g5.xlarge", "A10G", 1, 0.4, market=Market.SPOT, zone="use1-az1")
B = offering("g5.xlarge", "A10G", 1, 0.4, market=Market.SPOT, zone="use1-az2")
OD = offering("g5.xlarge", "A10G", 1, 1.0)


def _at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def _records(log: AvailabilityLog, hours: float) -> dict[str, object]:
    return {r.key: r for r in log.records(_at(hours))}


def test_time_goes_to_the_state_seen_at_its_start_and_runs_are_measured() -> None:
    log = AvailabilityLog()
    down_a = replace(A, available=False)
    log.observe(_at(0), [A, B, OD], {})
    log.observe(_at(2), [down_a, B, OD], {})  # A up 2 h, then gone
    log.observe(_at(3), [A, replace(B, available=False), OD], {})  # A back after 1 h; B's 3 h run ends
    got = _records(log, 3.5)
    a, b, market = got[A.key], got[B.key], got[spot_market_key(A)]
    assert (a.up_hours, a.down_hours, a.ended_runs, a.recent_runs_h) == (2.0, 1.0, 1, (2.0,))
    assert a.up_now and a.up_for_h == 0.5  # up again since hour 3
    assert (b.up_hours, b.ended_runs, b.recent_runs_h, b.up_now) == (3.0, 1, (3.0,), False)
    assert (market.up_hours, market.down_hours, market.ended_runs) == (3.0, 0.0, 0)  # some zone always had spot
    assert OD.key not in got  # on-demand is not a spot pool


def test_a_capacity_error_counts_as_down_and_a_pool_we_hold_as_up() -> None:
    log = AvailabilityLog()
    log.observe(_at(0), [A], {})
    log.observe(_at(1), [A], {A.key: _at(1.5)})  # InsufficientCapacity marked it until 1.5 h
    log.observe(_at(2), [replace(A, available=False)], {}, held={A.key})  # our instance holds its only slot
    a = _records(log, 2)[A.key]
    assert (a.up_hours, a.down_hours, a.ended_runs) == (1.0, 1.0, 1) and a.up_now


def test_the_log_forgets_by_hours_observed() -> None:
    """What was seen counts in full for the window, then half as much every half-life,
    by the observed hour it fell in; the totals stay what was seen."""
    log = AvailabilityLog(full_weight_h=2.0, half_life_h=1.0)
    log.observe(_at(0), [A], {})
    log.observe(_at(2), [replace(A, available=False)], {})  # a 2 h run ends at hour 2
    log.observe(_at(3), [A], {})  # back after a 1 h outage
    log.observe(_at(4), [replace(A, available=False)], {})  # a 1 h run
    a = _records(log, 6)[A.key]  # hours 0..3 end 5, 4, 3, 2 h before: weights 1/8, 1/4, 1/2, 1
    assert (a.up_hours, a.down_hours, a.ended_runs, a.recent_runs_h) == (3.0, 1.0, 2, (2.0, 1.0))
    assert (a.recent_up_h, a.recent_down_h, a.recent_ended) == (0.125 + 0.25 + 1.0, 0.5, 0.25 + 1.0)
    assert a.recent_runs_weight == (0.25, 1.0)
    now = _records(log, 4)[A.key]  # two hours earlier only hour 0 is past the window
    assert (now.recent_up_h, now.recent_down_h, now.recent_ended) == (0.5 + 1.0 + 1.0, 1.0, 2.0)
    never = AvailabilityLog(half_life_h=None)  # forgetting off
    never.observe(_at(0), [A], {})
    never.observe(_at(2), [replace(A, available=False)], {})
    b = _records(never, 300)[A.key]
    assert (b.recent_up_h, b.recent_ended, b.recent_runs_weight) == (None, None, ())  # nothing faded: the totals


def test_a_default_log_weighs_a_jobs_own_window_in_full() -> None:
    """Three days count in full (``FULL_WEIGHT_H``): a job's own deadline window
    is learned from exactly as without forgetting; a week back fades."""
    log = AvailabilityLog()
    for hour in range(0, 168, 4):  # up 3 h, down 1 h, for a week
        log.observe(_at(hour), [A], {})
        log.observe(_at(hour + 3), [replace(A, available=False)], {})
    a = _records(log, 167)[A.key]
    assert a.recent_ended < a.ended_runs == 42 and a.recent_up_h < a.up_hours
    assert all(w == 1.0 for w in a.recent_runs_weight[-18:]) and a.recent_runs_weight[0] < 0.1
    fresh = AvailabilityLog()
    for hour in range(0, 72, 4):
        fresh.observe(_at(hour), [A], {})
        fresh.observe(_at(hour + 3), [replace(A, available=False)], {})
    f = _records(fresh, 71)[A.key]
    assert (f.recent_up_h, f.recent_down_h, f.recent_ended, f.recent_runs_weight) == (None, None, None, ())
