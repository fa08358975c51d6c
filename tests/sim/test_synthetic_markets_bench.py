"""bench/synthetic_markets.py: made-up markets whose right answer is known, and the policy on two of them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import ModuleType

import pytest

from spotfleet.model.offering import Market
from spotfleet.sim.engine import SimSettings
from spotfleet.sim.scenario import SingleJobRun, run_single_job
from spotfleet.sim.traces import load_traces

from .helpers import load_bench


def bench() -> ModuleType:
    return load_bench("synthetic_markets")


def test_every_probe_writes_a_trace_set_the_simulator_loads(tmp_path: Path) -> None:
    b = bench()
    for probe in b.PROBES:
        traces = load_traces([b.write_market(probe, tmp_path)])
        zones = 3 if probe.name == "dear-zone-bridges" else 2  # two cheap zones and a dear one
        assert len(traces.zones) == zones and traces.n_ticks == b.TICKS and traces.tick_seconds == b.TICK_S
    returns = {z.zone: z for z in load_traces([tmp_path / "cheaper-zone-returns"]).zones}
    cheap = returns["us-east-1b"]
    # down for the first 5 h of every 60 h, up the other 55; the dear zone never goes away
    assert list(cheap.available[:31]) == [0] * 30 + [1] and sum(cheap.available[:360]) == 330
    assert min(returns["us-east-1a"].available) == 1
    # the flapping market is drawn from the seed: the same seed, the same market
    again = b.write_market(b.BY_NAME["flapping"], tmp_path / "again")
    assert (again / "us-west-2a.json").read_text() == (tmp_path / "flapping" / "us-west-2a.json").read_text()


def test_outages_that_the_other_zone_covers_are_ridden_on_spot(tmp_path: Path) -> None:
    """regular-outages from its first tick: each zone is up 6 h and down 2 h, offset by 4 h, so
    one zone always has spot. Stepped every tick, the job moves to the other zone ahead of every
    outage and never buys on-demand."""
    b = bench()
    traces = load_traces([b.write_market(b.BY_NAME["regular-outages"], tmp_path)])
    run = run_single_job(traces, "spotfleet", work_hours=48.0, deadline_hours=52.0, start_tick=0,
                         settings=SimSettings(skip_quiet=False))  # fmt: skip
    best = run_single_job(traces, "optimal", work_hours=48.0, deadline_hours=52.0, start_tick=0)
    assert run.sim is not None and not run.missed
    bills = sorted(run.sim.bills, key=lambda bill: bill.launched_at)
    assert {bill.market for bill in bills} == {Market.SPOT} and run.sim.spot_share == 1.0
    zones = [bill.zone for bill in bills]
    assert len(zones) >= 10 and all(a != b for a, b in itertools.pairwise(zones))  # alternating
    assert run.cost <= 1.10 * best.cost


def test_skipping_quiet_ticks_does_not_hide_a_move_to_a_cheaper_zone(tmp_path: Path) -> None:
    """cheaper-zone-returns from its first tick: the job starts in the $2.00 zone while the $0.90 one
    is down for 5 h; after it is back nothing in the traces changes for 55 h. The loop must keep
    stepping while a cheaper pool is open (``Simulation._cheaper_spot_open``), or the move the live
    controller makes is never seen: skipping once kept the job all 48 h in the dear zone."""
    b = bench()
    traces = load_traces([b.write_market(b.BY_NAME["cheaper-zone-returns"], tmp_path)])

    def run(skip: bool) -> SingleJobRun:
        return run_single_job(traces, "spotfleet", work_hours=48.0, deadline_hours=52.0, start_tick=0,
                              settings=SimSettings(skip_quiet=skip))  # fmt: skip

    skipping, every = run(True), run(False)
    assert skipping.sim is not None and not skipping.missed
    bills = sorted(skipping.sim.bills, key=lambda bill: bill.launched_at)
    assert bills[0].zone == "us-east-1a" and bills[-1].zone == "us-east-1b"  # moved to the cheap zone
    assert skipping.cost == pytest.approx(every.cost)


def test_a_job_follows_a_cheaper_zone_once_the_gap_has_paid_for_the_move(tmp_path: Path) -> None:
    """Ski rental (``migration_gain``): the move is made once the price gap has cost the job as much
    as the move, not when the saving beats the move's cost twice over. On cheaper-zone-returns the
    $0.90 zone is back at hour 5 and the job, in the $2.00 one, is there by hour 10 (hour 18.5
    with the factor of two); on price-waves, where the prices cross every 24 h, it follows them
    instead of staying all 48 h in the zone it started in."""
    b = bench()

    def zones(market: str) -> list[tuple[float, str]]:
        traces = load_traces([b.write_market(b.BY_NAME[market], tmp_path)])
        run = run_single_job(traces, "spotfleet", work_hours=48.0, deadline_hours=52.0, start_tick=0)
        assert run.sim is not None and not run.missed
        bills = sorted(run.sim.bills, key=lambda bill: bill.launched_at)
        return [((bill.launched_at - run.start).total_seconds() / 3600.0, bill.zone) for bill in bills]

    returns = zones("cheaper-zone-returns")
    assert returns[0][1] == "us-east-1a" and returns[-1][1] == "us-east-1b"
    assert returns[-1][0] < 10.0  # launched in the cheap zone within 5 h of its return
    assert len({zone for _, zone in zones("price-waves")}) == 2


def test_the_bench_prints_a_row_and_a_json_line_per_market_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench().main(["--markets", "always-up", "--policies", "spotfleet", "--starts", "1"]) == 0
    out = capsys.readouterr().out
    (line,) = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert line["market"] == "always-up" and line["policy"] == "spotfleet" and line["every_tick"] is True
    assert line["deadline_misses"] == 0 and line["spot_share"] == 1.0
    assert line["ratio_to_optimal"] <= 1.01  # spot in the cheaper zone throughout, as the optimum
    assert "rides the $0.92 zone throughout" in out


def test_skip_quiet_is_recorded_and_keep_leaves_the_markets_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--markets", "never-up", "--policies", "greedy", "--starts", "1", "--skip-quiet", "--keep", str(tmp_path)]
    assert bench().main(argv) == 0
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert line["every_tick"] is False and line["spot_share"] == 0.0 and line["ratio_to_optimal"] == 1.0
    assert sorted(p.name for p in (tmp_path / "never-up").iterdir()) == ["us-east-1a.json", "us-east-1b.json"]


def test_bad_options_are_clear_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench().main(["--starts", "0"])
    assert exc.value.code == 2 and "--starts 0: give at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench().main(["--markets", "nowhere"])
    assert exc.value.code == 2 and "invalid choice: 'nowhere'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench().main(["--help"])
    assert exc.value.code == 0 and "cheaper-zone-returns" in capsys.readouterr().out
