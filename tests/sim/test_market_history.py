"""A simulated controller that has watched its market before the job: the traces
before the start are replayed into its availability log, and nothing after it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from spotfleet.errors import InvalidSpec
from spotfleet.model.offering import Market
from spotfleet.policies.forecast import SpotSupply
from spotfleet.service import market_history_log
from spotfleet.sim.engine import SimSettings, Simulation
from spotfleet.sim.scenario import make_policy, single_job
from spotfleet.sim.traces import availability_history
from tests.policies.builders import offering

from .helpers import MakeSet, trace_file

POOL_A = "aws:spot:p3.2xlarge:us-east-1a"
POOL_B = "aws:spot:p3.2xlarge:us-east-1b"
MARKET = "aws:spot:p3.2xlarge:*"


def test_the_history_is_the_first_tick_and_every_change(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 1, 0, 0, 1, 1]), ("us-east-1b", [0, 0, 0, 1, 1, 1]), tick=1800)
    seen = list(availability_history(traces, first_tick=0, end_tick=6))
    assert [(traces.tick_at(t), states) for t, states in seen] == [
        (0, {POOL_A: True, POOL_B: False}),
        (2, {POOL_A: False, POOL_B: False}),
        (3, {POOL_A: False, POOL_B: True}),
        (4, {POOL_A: True, POOL_B: True}),
    ]
    assert list(availability_history(traces, first_tick=4, end_tick=2)) == []  # an empty window


def _sim(traces, start_tick: int, history_hours: float) -> Simulation:  # type: ignore[no-untyped-def]
    item = single_job(traces, work_hours=1.0, deadline_hours=3.0, start_tick=start_tick,
                      checkpoint_interval=timedelta(minutes=30))  # fmt: skip
    return Simulation(traces, [item], make_policy("spotfleet", restart_hours=0.2, tick_hours=0.5),
                      start=traces.time_of(start_tick), settings=SimSettings(history_hours=history_hours))  # fmt: skip


def test_the_controller_learns_the_runs_before_the_start_and_none_after(make_set: MakeSet) -> None:
    # zone a: up 1 tick, down 1, up 2, down 1, then (from the start at tick 6) up for good;
    # zone b is down until tick 6 and then up: nothing of b's future may leak into the log
    a = [1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]
    b = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    traces = make_set(("us-east-1a", a), ("us-east-1b", b), tick=1800)
    sim = _sim(traces, start_tick=6, history_hours=100.0)  # more than the traces hold before the start
    got = {r.key: r for r in sim.controller.availability.records(traces.time_of(6))}
    pool = got[POOL_A]
    assert pool.recent_runs_h == (0.5, 1.0)  # the two up runs that ended before the start
    assert (pool.up_hours, pool.down_hours) == (1.5, 1.0)  # ticks 0–4 credited; tick 5's state is current
    assert pool.up_now and pool.up_for_h == 0.5  # up since tick 5
    b_pool = got[POOL_B]
    assert (b_pool.up_hours, b_pool.ended_runs, b_pool.up_now) == (0.0, 0, False)  # its tick-6 return is not known
    assert got[MARKET].recent_runs_h == (0.5, 1.0)
    cold = _sim(traces, start_tick=6, history_hours=0.0)
    assert cold.controller.availability.records(traces.time_of(6)) == ()


def test_a_run_with_history_still_finishes_in_time(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1, 0] * 8 + [1] * 8), ("us-east-1b", [0, 1] * 8 + [1] * 8), tick=1800)
    result = _sim(traces, start_tick=16, history_hours=8.0).run()
    assert result.deadline_misses == 0 and result.jobs[0].finished_at is not None


def _write(folder: Path, zone: str, available: list[int]) -> None:
    tf = trace_file(zone, available, tick=3600, start="2023-01-01T00:00:00Z")
    (folder / f"{zone}.json").write_text(json.dumps(tf.model_dump(mode="json")))


def test_market_history_files_seed_a_log_that_ends_with_them(tmp_path: Path) -> None:
    _write(tmp_path, "us-east-1a", [1, 1, 0, 1, 1, 1, 0, 0, 1])
    log = market_history_log([tmp_path])
    (pool,) = [r for r in log.records() if r.key == POOL_A]
    assert pool.recent_runs_h == (2.0, 3.0) and (pool.up_hours, pool.down_hours) == (5.0, 3.0)
    # the first live observation, years later, starts a new run: the gap is not credited
    live = offering("p3.2xlarge", "V100", 1, 0.9, market=Market.SPOT, zone="us-east-1a")
    later = datetime(2026, 12, 1, tzinfo=UTC)
    log.observe(later, [live], {})
    log.observe(later + timedelta(hours=1), [live], {})
    (pool,) = [r for r in log.records(later + timedelta(hours=1)) if r.key == POOL_A]
    assert (pool.up_hours, pool.down_hours, pool.recent_runs_h) == (6.0, 3.0, (2.0, 3.0))
    assert pool.up_for_h == 1.0
    # nor does the gap age what the files taught: nine hours observed, all in the full-weight window
    assert (pool.recent_up_h, pool.recent_down_h, pool.recent_runs_weight) == (None, None, ())  # nothing faded


def test_market_history_errors_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec) as missing:
        market_history_log([tmp_path / "nope"])
    assert missing.value.field == "market_history" and "does not exist" in missing.value.message
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InvalidSpec) as bad:
        market_history_log([tmp_path])
    assert bad.value.field == "market_history" and "bad.json" in bad.value.message


def test_a_service_warns_when_no_provider_is_named_after_the_traces_cloud(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Pools match by provider name: history of cloud ``aws`` under a config whose
    only provider is ``local`` is learned and never used, and ``up`` says so."""
    from spotfleet.clock import FakeClock
    from spotfleet.config import load_config
    from spotfleet.service import Service, unmatched_history_clouds

    traces = tmp_path / "traces"
    traces.mkdir()
    _write(traces, "us-east-1a", [1, 1, 0, 1])
    log = market_history_log([traces])
    assert unmatched_history_clouds(log, ["local"]) == ["aws"]
    assert unmatched_history_clouds(log, ["aws", "local"]) == []
    cfg = load_config(overrides={"data_dir": str(tmp_path / "data"), "api.port": 0, "market_history": [str(traces)]})
    with caplog.at_level("WARNING", logger="spotfleet.service"):
        service = Service(cfg, clock=FakeClock())
    service.store.close()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("'aws' is no provider in this config (local)" in m and "name the provider 'aws'" in m for m in warned)


def test_a_week_of_history_forgets_the_flaps_of_days_ago(make_set: MakeSet) -> None:
    """The simulator's replay feeds the log that forgets: a pool that flapped every
    hour until a week ago and has run for a week since (ended by one down hour just
    before the start) comes out as a pool of long runs, not as the flapper its
    totals describe."""
    flaps, week = [1, 0] * 48, [1] * 167 + [0]  # hourly ticks: 96 h of 1 h blips, a 167 h run, 1 h down
    traces = make_set(("us-east-1a", flaps + week + [1] * 8), tick=3600)
    start = len(flaps) + len(week)
    sim = _sim(traces, start_tick=start, history_hours=float(start))
    (pool,) = [r for r in sim.controller.availability.records(traces.time_of(start)) if r.key == POOL_A]
    assert pool.ended_runs == 49 and pool.recent_ended is not None and pool.recent_ended < 3.0
    remembered = SpotSupply.observed(replace(pool, recent_up_h=None, recent_down_h=None, recent_ended=None))
    learned = SpotSupply.observed(pool)
    assert remembered.mean_up_h < 5.0 < 20.0 < learned.mean_up_h
    assert learned.availability > 0.9 > remembered.availability
