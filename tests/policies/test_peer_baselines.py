"""SkyNomad's multi-region Uniform Progress, UP(S) (``ups``), decision by decision.

Run through the simulator on hand-made two-region traces (half-hour ticks, no
restart delay), so the decisions are the ones the real controller executes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from spotfleet.model.offering import Market
from spotfleet.sim.engine import SimResult
from spotfleet.sim.scenario import POLICY_NAMES, make_policy, run_single_job
from spotfleet.sim.traces import TraceSet, build_trace_set
from tests.sim.helpers import trace_file


def _set(east: Sequence[int], west: Sequence[int], *, east_spot: float = 1.0, west_spot: float = 1.0) -> TraceSet:
    files = [
        trace_file("us-east-1a", east, spot=east_spot, on_demand=3.0),
        trace_file("us-west-2a", west, spot=west_spot, on_demand=3.0),
    ]
    return build_trace_set([(f.zone, f) for f in files])


def _run(traces: TraceSet, policy: str, *, work: float, deadline: float) -> SimResult:
    result = run_single_job(traces, policy, work_hours=work, deadline_hours=deadline, start_tick=0, restart_hours=0)
    assert result.sim is not None
    assert not result.missed
    return result.sim


def test_registered_for_the_bench() -> None:
    assert "ups" in POLICY_NAMES
    assert make_policy("ups").name == "ups"


def test_follows_spot_into_another_region_where_single_region_up_cannot() -> None:
    traces = _set([1, 1] + [0] * 10, [0, 0] + [1] * 10)
    ups = _run(traces, "ups", work=2, deadline=5)
    assert ups.cost == pytest.approx(2.0, abs=0.02)  # 1 h east spot + 1 h west spot
    assert {b.zone for b in ups.bills} == {"us-east-1a", "us-west-2a"}
    assert all(b.market is Market.SPOT for b in ups.bills)
    pinned = _run(traces, "uniform-progress", work=2, deadline=5)
    assert {b.zone for b in pinned.bills} == {"us-east-1a"}  # pinned to its first region
    assert pinned.cost > ups.cost


def test_tries_regions_in_a_fixed_order_not_by_price() -> None:
    traces = _set([1] * 12, [1] * 12, east_spot=2.0, west_spot=1.0)
    ups = _run(traces, "ups", work=2, deadline=5)
    assert {b.zone for b in ups.bills} == {"us-east-1a"}
    greedy = _run(traces, "greedy", work=2, deadline=5)
    assert {b.zone for b in greedy.bills} == {"us-west-2a"}


def test_behind_the_line_without_spot_it_buys_on_demand_where_it_last_ran() -> None:
    # West spot for the first half hour only, then no spot anywhere: 2 h of work
    # in 3 h is behind the line at once, so on-demand, in the west.
    traces = _set([0] * 12, [1] + [0] * 11)
    ups = _run(traces, "ups", work=2, deadline=3)
    markets = [(b.zone, b.market) for b in sorted(ups.bills, key=lambda b: b.launched_at)]
    assert markets[0] == ("us-west-2a", Market.SPOT)
    assert ("us-west-2a", Market.ON_DEMAND) in markets
    assert ("us-east-1a", Market.ON_DEMAND) not in markets
