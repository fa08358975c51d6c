"""Checkpoint moves across regions cost egress, in the simulator and in the optimum alike.

Two regions, one zone each (half-hour ticks, spot $1/h, on-demand $3/h, no
restart delay): us-east-1a has spot for the first hour, us-west-2a for the
second, neither after. Two hours of work due in three: with free moves the
optimum is spot in the east then spot in the west ($2); with a 150 GB
checkpoint the move costs 150 × $0.02 = $3 and staying on on-demand in one
region ($4) wins.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from spotfleet.sim.engine import SimSettings
from spotfleet.sim.optimal import optimal_single_job
from spotfleet.sim.scenario import run_single_job

from .helpers import MakeSet, trace_file

EAST = [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
WEST = [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]


def _two_regions(make_set: MakeSet):  # type: ignore[no-untyped-def]
    return make_set(
        trace_file("us-east-1a", EAST, spot=1.0, on_demand=3.0),
        trace_file("us-west-2a", WEST, spot=1.0, on_demand=3.0),
    )


def test_optimum_moves_only_when_the_move_is_cheap(make_set: MakeSet) -> None:
    traces = _two_regions(make_set)
    free = optimal_single_job(traces, work_hours=2, deadline_hours=3, restart_hours=0, with_schedule=False)
    assert free.cost == pytest.approx(2.0)
    small = optimal_single_job(traces, work_hours=2, deadline_hours=3, restart_hours=0, checkpoint_gb=50)
    assert small.cost == pytest.approx(2.0 + 50 * 0.02)  # still moves: $3 < $4
    big = optimal_single_job(traces, work_hours=2, deadline_hours=3, restart_hours=0, checkpoint_gb=150)
    assert big.cost == pytest.approx(4.0)  # one hour spot, one hour on-demand, same region
    internet = optimal_single_job(
        traces, work_hours=2, deadline_hours=3, restart_hours=0, checkpoint_gb=50, egress_inter_region_per_gib=0.09
    )
    assert internet.cost == pytest.approx(4.0)


def test_optimum_with_a_negligible_checkpoint_equals_the_free_move_model(make_set: MakeSet) -> None:
    traces = _two_regions(make_set)
    for deadline in (2.5, 3.0, 4.0, 5.0):
        free = optimal_single_job(traces, work_hours=2, deadline_hours=deadline, restart_hours=0.5)
        tiny = optimal_single_job(traces, work_hours=2, deadline_hours=deadline, restart_hours=0.5, checkpoint_gb=1e-9)
        assert tiny.feasible == free.feasible
        if free.feasible:
            assert tiny.cost == pytest.approx(free.cost)
            assert tiny.finish_seconds == pytest.approx(free.finish_seconds)


def test_no_egress_before_any_progress(make_set: MakeSet) -> None:
    """Starting in the west with nothing saved moves nothing."""
    traces = make_set(
        trace_file("us-east-1a", [0] * 8, spot=1.0, on_demand=3.0),
        trace_file("us-west-2a", [1] * 8, spot=1.0, on_demand=3.0),
    )
    best = optimal_single_job(traces, work_hours=2, deadline_hours=3, restart_hours=0, checkpoint_gb=1000)
    assert best.cost == pytest.approx(2.0)


def test_simulator_charges_the_move_a_policy_makes(make_set: MakeSet) -> None:
    """Greedy rides east spot, is reclaimed, resumes in the west: the restore pays egress."""
    traces = _two_regions(make_set)
    runs = {
        gb: run_single_job(
            traces,
            "greedy",
            work_hours=2,
            deadline_hours=5,
            start_tick=0,
            restart_hours=0,
            checkpoint_interval=timedelta(minutes=10),
            checkpoint_gb=gb,
        )
        for gb in (0.0, 50.0)
    }
    assert runs[0.0].sim is not None and runs[50.0].sim is not None
    assert runs[0.0].sim.egress_cost == 0.0
    moves = runs[50.0].sim.egress
    assert moves, "greedy moved the job east → west; the move must be charged"
    assert all(usd == pytest.approx(50 * 0.02) for _, _, usd in moves)
    assert runs[50.0].cost == pytest.approx(runs[0.0].cost + 50 * 0.02 * len(moves))


def test_egress_rates() -> None:
    s = SimSettings(checkpoint_gb=10)
    assert s.egress_rate(("aws", "us-east-1"), ("aws", "us-east-1")) == 0.0
    assert s.egress_rate(("aws", "us-east-1"), ("aws", "us-west-2")) == 0.02
    assert s.egress_rate(("aws", "us-east-1"), ("gcp", "us-east4")) == 0.09
