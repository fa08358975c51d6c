"""SkyNomad's multi-region Uniform Progress, UP(S) (``ups``), decision by decision.

Run through the simulator on hand-made two-region traces (half-hour ticks, no
restart delay), so the decisions are the ones the real controller executes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from spotfleet.model.offering import Market
from spotfleet.sim.engine import SimResult
from spotfleet.sim.scenario import POLICY_NAMES, make_policy, run_single_job
from spotfleet.sim.traces import TraceSet, build_trace_set
from tests.sim.helpers import trace_file
from tests.sim.test_policy_cost_subsets import bench, write_traces


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


def test_takes_the_cheapest_spot_first() -> None:
    traces = _set([1] * 12, [1] * 12, east_spot=2.0, west_spot=1.0)
    ups = _run(traces, "ups", work=2, deadline=5)
    assert {b.zone for b in ups.bills} == {"us-west-2a"}
    greedy = _run(traces, "greedy", work=2, deadline=5)
    assert {b.zone for b in greedy.bills} == {"us-west-2a"}


def test_after_a_reclaim_it_tries_other_regions_first_eager_failover() -> None:
    # us-east-1a ($1) is reclaimed at hour 1; us-east-1b ($1.5, same region) and
    # us-west-2a ($2) have spot throughout. Cheapest-first alone would take
    # us-east-1b; UP(S) moves the region it was just reclaimed in to the end.
    files = [
        trace_file("us-east-1a", [1, 1] + [0] * 10, spot=1.0, on_demand=3.0),
        trace_file("us-east-1b", [1] * 12, spot=1.5, on_demand=3.0),
        trace_file("us-west-2a", [1] * 12, spot=2.0, on_demand=3.0),
    ]
    traces = build_trace_set([(f.zone, f) for f in files])
    ups = _run(traces, "ups", work=2, deadline=5)
    order = [(b.zone, b.market) for b in sorted(ups.bills, key=lambda b: b.launched_at)]
    assert order == [("us-east-1a", Market.SPOT), ("us-west-2a", Market.SPOT)]
    greedy = _run(traces, "greedy", work=2, deadline=5)  # greedy takes the cheapest left
    assert [b.zone for b in sorted(greedy.bills, key=lambda b: b.launched_at)] == ["us-east-1a", "us-east-1b"]


def test_behind_the_line_without_spot_it_buys_on_demand_where_it_last_ran() -> None:
    # West spot for the first half hour only, then no spot anywhere: 2 h of work
    # in 3 h is behind the line at once, so on-demand, in the west.
    traces = _set([0] * 12, [1] + [0] * 11)
    ups = _run(traces, "ups", work=2, deadline=3)
    markets = [(b.zone, b.market) for b in sorted(ups.bills, key=lambda b: b.launched_at)]
    assert markets[0] == ("us-west-2a", Market.SPOT)
    assert ("us-west-2a", Market.ON_DEMAND) in markets
    assert ("us-east-1a", Market.ON_DEMAND) not in markets


# ---------------------------------------------------------------- ucm (SkyNomad's Unified Cost Model)


def test_ucm_registered_for_the_bench() -> None:
    assert "ucm" in POLICY_NAMES
    assert make_policy("ucm").name == "ucm"


def test_ucm_takes_the_cheaper_spot_not_the_first_region() -> None:
    # Both regions have spot all along; west's is half the price. UCM scores each
    # pool's net value per hour, so west.
    traces = _set([1] * 12, [1] * 12, east_spot=2.0, west_spot=1.0)
    ucm = _run(traces, "ucm", work=2, deadline=5)
    assert {(b.zone, b.market) for b in ucm.bills} == {("us-west-2a", Market.SPOT)}
    assert ucm.cost == pytest.approx(2.0, abs=0.02)


def test_ucm_moves_a_running_job_to_a_cheaper_spot_that_appears() -> None:
    # East spot at $1 from the start; west spot at $0.3 from the second hour on.
    traces = _set([1] * 12, [0, 0] + [1] * 10, east_spot=1.0, west_spot=0.3)
    ucm = _run(traces, "ucm", work=3, deadline=5)
    order = [(b.zone, b.market) for b in sorted(ucm.bills, key=lambda b: b.launched_at)]
    assert order == [("us-east-1a", Market.SPOT), ("us-west-2a", Market.SPOT)]
    ups = _run(traces, "ups", work=3, deadline=5)
    assert {b.zone for b in ups.bills} == {"us-east-1a"}  # UP(S) stays until preempted
    assert ucm.cost < ups.cost


def test_ucm_with_no_spot_anywhere_values_progress_at_on_demand_and_buys_it_at_once() -> None:
    # No spot seen anywhere: the reference plan is all on-demand, so V = 1.2 × $3
    # and on-demand's net value (V − $3) beats waiting, even with slack left.
    traces = _set([0] * 12, [0] * 12)
    ucm = _run(traces, "ucm", work=2, deadline=5)
    assert {b.market for b in ucm.bills} == {Market.ON_DEMAND}
    assert ucm.cost == pytest.approx(6.0, abs=0.05)
    greedy = _run(traces, "greedy", work=2, deadline=5)  # greedy waits out its slack first
    assert min(b.launched_at for b in ucm.bills) < min(b.launched_at for b in greedy.bills)


def test_ucm_runs_under_the_artifacts_deadline_safety_net() -> None:
    # Cheap spot up two ticks in three (30-min ticks, 0.2 h restarts): UCM alone keeps
    # chasing it and, before the net, finished after the deadline. The artifact's
    # environment latches every policy onto on-demand once the work no longer fits.
    files = [
        trace_file("us-east-1a", [1, 1, 0] * 8, spot=0.3, on_demand=3.0),
        trace_file("us-west-2a", [0] * 24, spot=0.3, on_demand=3.0),
    ]
    traces = build_trace_set([(f.zone, f) for f in files])
    result = run_single_job(traces, "ucm", work_hours=3, deadline_hours=4, start_tick=0, restart_hours=0.2)
    assert result.sim is not None and not result.missed
    bills = sorted(result.sim.bills, key=lambda b: b.launched_at)
    assert bills[0].market is Market.SPOT and bills[-1].market is Market.ON_DEMAND


def test_the_cross_check_command_runs_ucm_and_ups_in_the_bench(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/simulator.md's ``bench/policy_cost.py --policies ucm ups greedy`` (CI-sized):
    a JSON line each, none below the optimum, no deadline missed."""
    traces = write_traces(tmp_path / "traces")
    code = bench().main(
        ["--traces", str(traces), "--starts", "2", "--work-hours", "4", "--deadline-hours", "8",
         "--policies", "ucm", "ups", "greedy", "--processes", "1"]
    )  # fmt: skip
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    by = {d["policy"]: d for d in lines}
    assert set(by) == {"optimal", "ucm", "ups", "greedy"}
    assert by["ucm"]["ratio_to_optimal"] >= 1.0 - 1e-9 and by["ucm"]["deadline_misses"] == 0
