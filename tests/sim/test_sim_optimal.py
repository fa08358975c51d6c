"""The omniscient optimum, checked by hand and against brute-force enumeration."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import pytest

from spotfleet.model.offering import Market
from spotfleet.sim.optimal import optimal_single_job
from spotfleet.sim.traces import TraceSet, load_traces

from .helpers import MakeSet, trace_file

HALF_HOUR = 1800


def brute_force(traces: TraceSet, *, work: float, deadline: float, restart: float, start_tick: int = 0) -> float:
    """Cheapest cost over every sequence of per-tick states, simulated second by second.

    States: idle, spot in each zone, on-demand in each zone. True semantics: a
    segment's first ``restart`` seconds make no progress; billing stops when done.
    """
    tick = traces.tick_seconds
    n_full, rest = divmod(deadline, tick)
    lengths = [tick] * int(n_full) + ([rest] if rest else [])
    states: list[tuple[str, Market | None]] = [("", None)]
    for z in traces.zones:
        states += [(z.key, Market.SPOT), (z.key, Market.ON_DEMAND)]
    best = math.inf
    for seq in itertools.product(range(len(states)), repeat=len(lengths)):
        progress = cost = 0.0
        prev = 0
        delay = 0.0
        done = False
        for i, s in enumerate(seq):
            key, market = states[s]
            if market is None:
                prev = 0
                continue
            trace = traces.zone(key)
            t = start_tick + i
            if market is Market.SPOT:
                if not (0 <= t < traces.n_ticks and trace.available[t] >= 1):
                    break
                price = float(trace.spot_price[t])
            else:
                price = trace.on_demand_price
            if s != prev:
                delay = restart
            used_delay = min(delay, lengths[i])
            delay -= used_delay
            productive = lengths[i] - used_delay
            if progress + productive >= work - 1e-9:
                cost += price * (used_delay + work - progress) / 3600
                done = True
                break
            progress += productive
            cost += price * lengths[i] / 3600
            prev = s
        if done:
            best = min(best, cost)
    return best


def test_spot_all_the_way_costs_work_plus_one_restart(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1] * 6), spot=1.0, on_demand=3.0)
    result = optimal_single_job(traces, work_hours=1, deadline_hours=2, restart_hours=0.2)
    assert result.cost == pytest.approx(1.2)
    assert result.finish_seconds == pytest.approx(1.2 * 3600)
    assert [(s.zone, s.market, s.start_tick, s.end_tick) for s in result.schedule] == [
        ("aws:p3.2xlarge:us-east-1a", Market.SPOT, 0, 3)
    ]
    assert result.schedule[0].seconds == pytest.approx(1.2 * 3600)


def test_no_spot_means_on_demand_plus_restart(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [0] * 6), spot=1.0, on_demand=3.0)
    result = optimal_single_job(traces, work_hours=1, deadline_hours=2, restart_hours=0.2)
    assert result.cost == pytest.approx(3.6)
    assert result.schedule[0].market is Market.ON_DEMAND


def test_spot_then_on_demand_when_spot_vanishes(make_set: MakeSet) -> None:
    # Spot for the first hour (0.8 h of progress after the restart), then 0.7 h of
    # work on on-demand plus a second restart: 1.0 + 0.9 × 3 = 3.7, done at 1.9 h.
    traces = make_set(("us-east-1a", [1, 1, 0, 0]), spot=1.0, on_demand=3.0)
    result = optimal_single_job(traces, work_hours=1.5, deadline_hours=2, restart_hours=0.2)
    assert result.cost == pytest.approx(3.7)
    assert result.finish_seconds == pytest.approx(1.9 * 3600)
    assert [s.market for s in result.schedule] == [Market.SPOT, Market.ON_DEMAND]
    assert result.restarts == 2
    assert sum(s.cost for s in result.schedule) == pytest.approx(result.cost)


def test_waits_idle_for_cheap_spot_when_the_deadline_allows(make_set: MakeSet) -> None:
    traces = make_set(
        trace_file("us-east-1a", [0, 0, 1, 1, 1, 1], spot=1.0),
        trace_file("us-east-1b", [1, 1, 1, 1, 1, 1], spot=2.0),
    )
    result = optimal_single_job(traces, work_hours=1, deadline_hours=3, restart_hours=0.2)
    assert result.cost == pytest.approx(1.2)
    assert result.schedule[0].start_tick == 2 and result.schedule[0].zone.endswith("us-east-1a")


def test_infeasible_when_work_and_restart_exceed_the_deadline(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1] * 4))
    result = optimal_single_job(traces, work_hours=2, deadline_hours=2, restart_hours=0.2)
    assert not result.feasible and result.cost == math.inf and result.schedule == ()


def test_restart_longer_than_a_tick(make_set: MakeSet) -> None:
    # 10-minute ticks, 0.2 h restart: the restart spans 1.2 ticks.
    traces = make_set(("us-east-1a", [1] * 12), tick=600, spot=1.0, on_demand=3.0)
    result = optimal_single_job(traces, work_hours=0.5, deadline_hours=2, restart_hours=0.2)
    assert result.cost == pytest.approx(0.7)


def test_start_tick_and_zone_filter(make_set: MakeSet) -> None:
    traces = make_set(
        trace_file("us-east-1a", [0, 0, 1, 1, 1, 1], spot=1.0),
        trace_file("us-east-1b", [1, 1, 1, 1, 1, 1], spot=0.5),
    )
    only_a = optimal_single_job(traces, work_hours=1, deadline_hours=2, start_tick=2, zones=["us-east-1a"])
    assert only_a.cost == pytest.approx(1.2)
    assert only_a.schedule[0].start_tick == 2
    both = optimal_single_job(traces, work_hours=1, deadline_hours=2, start_tick=2)
    assert both.cost == pytest.approx(0.6)


def _random_case(make_set: MakeSet, seed: int) -> tuple[TraceSet, float, float, float]:
    rng = random.Random(seed)
    n = 6
    odds = [0, 1, 1] if seed % 2 else [0, 0, 0, 1]  # even seeds: scarce spot
    zones = [
        trace_file(
            name,
            [rng.choice(odds) for _ in range(n)],
            spot=[round(rng.uniform(0.5, 2.0), 2) for _ in range(n)],
            on_demand=rng.choice([3.0, 3.5]),
        )
        for name in ("us-east-1a", "us-east-1b")
    ]
    work = rng.choice([0.75, 1.0, 1.5, 2.0])
    deadline = rng.choice([2.5, 2.75, 3.0])  # 2.75 h: the last tick is a quarter hour
    restart = rng.choice([0.1, 0.2, 0.6])  # 0.6 h: longer than a tick
    return make_set(*zones), work, deadline, restart


@pytest.mark.parametrize("seed", range(12))
def test_matches_brute_force_on_random_tiny_traces(make_set: MakeSet, seed: int) -> None:
    traces, work, deadline, restart = _random_case(make_set, seed)
    dp = optimal_single_job(traces, work_hours=work, deadline_hours=deadline, restart_hours=restart)
    brute = brute_force(traces, work=work * 3600, deadline=deadline * 3600, restart=restart * 3600)
    assert dp.feasible
    assert dp.cost == pytest.approx(brute)
    assert sum(s.cost for s in dp.schedule) == pytest.approx(dp.cost)
    paid = (work + restart * dp.restarts) * 3600
    assert sum(s.seconds for s in dp.schedule) == pytest.approx(paid)
    assert dp.finish_seconds <= deadline * 3600 + 1e-6


def test_random_cases_exercise_both_markets_and_zone_switches(make_set: MakeSet) -> None:
    """Guards the brute-force test against only ever checking trivial schedules."""
    schedules = []
    for seed in range(12):
        traces, work, deadline, restart = _random_case(make_set, seed)
        dp = optimal_single_job(traces, work_hours=work, deadline_hours=deadline, restart_hours=restart)
        schedules.append(dp.schedule)
    assert any(any(s.market is Market.ON_DEMAND for s in sched) for sched in schedules)
    assert any(len({s.zone for s in sched}) > 1 for sched in schedules)
    assert any(any(s.market is Market.SPOT for s in sched) for sched in schedules)


def test_shared_traces_optimum_is_below_on_demand(shared_traces: Path) -> None:
    traces = load_traces([shared_traces / "gcp-h100-2025-10"])
    result = optimal_single_job(traces, work_hours=48, deadline_hours=52, start_tick=100)
    cheapest_od = min(z.on_demand_price for z in traces.zones)
    assert result.feasible
    assert result.cost < 0.3 * cheapest_od * 48.2
    assert result.finish_seconds <= 52 * 3600
    assert sum(s.cost for s in result.schedule) == pytest.approx(result.cost)


def test_a_gang_needs_capacity_for_every_node_and_pays_for_each(make_set: MakeSet) -> None:
    traces = make_set(
        trace_file("us-east-1a", [2, 2, 1, 1, 2, 2], spot=1.0, requested=2),
        trace_file("us-east-1b", [1] * 6, spot=0.5, requested=2),
    )
    one = optimal_single_job(traces, work_hours=1, deadline_hours=3, restart_hours=0.2)
    assert one.cost == pytest.approx(0.6)  # one node fits the cheap zone
    gang = optimal_single_job(traces, work_hours=1, deadline_hours=3, restart_hours=0.2, nodes=2)
    # Only us-east-1a has room for two, at ticks 0-1 (0.8 h of work after the
    # restart) and 4-5 (the last 0.2 h plus a second restart): 2 nodes × 1.4 h × $1.
    assert gang.cost == pytest.approx(2 * 1.4 * 1.0)
    assert {s.zone for s in gang.schedule} == {"aws:p3.2xlarge:us-east-1a"}
