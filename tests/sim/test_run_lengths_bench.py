"""bench/run_lengths.py: run-length figures of a trace set, checked on hand-made zones."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from .helpers import load_bench, trace_file


def bench() -> ModuleType:
    return load_bench("run_lengths")


def _set(folder: Path) -> Path:
    """Half-hour ticks. us-east-1a: runs 0.5, 1.0, 2.0 h, then one cut off by the trace's
    end (not counted); us-east-1b: runs 2.0, 0.5 h."""
    folder.mkdir(parents=True)
    zones = {"us-east-1a": [1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1], "us-east-1b": [1, 1, 1, 1, 0, 1, 0]}
    for zone, avail in zones.items():
        (folder / f"{zone}.json").write_text(trace_file(zone, avail, tick=1800).model_dump_json())
    return folder


def test_figures_of_a_hand_made_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _set(tmp_path / "set")
    assert bench().main([str(folder), "--restart-hours", "0.2", "--short-hours", "0.6", "--after", "1"]) == 0
    out = capsys.readouterr().out
    line, pooled = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    # two zones at 3/3.5 and 2/2.5 per hour spread less than their own Poisson noise: no finite prior strength
    assert pooled["zones"] == 2 and pooled["rate_mean_per_h"] == pytest.approx((3 / 3.5 + 2 / 2.5) / 2, abs=1e-4)
    assert pooled["noise_variance"] > pooled["rate_variance"] and pooled["prior_strength_h"] is None
    assert line["runs"] == 5
    # logs of the pairs (0.5, 1), (1, 2), (2, 0.5): x = (-a, 0, a), y = (0, a, -a) → correlation -1/2
    assert line["log_corr_consecutive"] == pytest.approx(-0.5)
    # usable lengths of the runs after the first of each zone: 0.8, 1.8 (1a) and 0.3 (1b);
    # only 1a's 1.0 h run follows a run shorter than 0.6 h
    assert line["usable_run_h"] == pytest.approx((0.8 + 1.8 + 0.3) / 3, abs=1e-3)
    assert line["usable_run_after_short_h"] == pytest.approx(0.8) and line["after_short_count"] == 1
    a = line["zones"]["us-east-1a"]
    assert a["runs"] == 3 and a["fresh_rate_per_h"] == pytest.approx(3 / 3.5, abs=1e-3)
    assert a["met_rate_per_h"] == pytest.approx(2 * 3.5 / (0.25 + 1 + 4), abs=1e-3)  # length-biased: lower
    assert "us-east-1b" in out and "met 2E[L]/E[L²]" in out


def test_pools_that_differ_give_the_prior_a_finite_strength() -> None:
    b = bench()
    calm = b.ZoneRuns("calm", [10.0] * 20)  # 0.1/h over 200 h
    flappy = b.ZoneRuns("flappy", [0.5] * 100)  # 2/h over 50 h
    got = b.pooled_spread([calm, flappy])
    mean, var = (0.1 + 2.0) / 2, ((2.0 - 0.1) / 2) ** 2
    noise = (0.1 / 200 + 2.0 / 50) / 2
    assert got["rate_mean_per_h"] == pytest.approx(mean, abs=1e-4)
    assert got["prior_strength_h"] == pytest.approx(mean / (var - noise), abs=0.01)  # about 1.2 h: weak


def test_a_missing_set_and_bad_options_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench().main([str(tmp_path / "nowhere")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert bench().main([str(_set(tmp_path / "set")), "--after", "0"]) == 2
    assert "--after must be ≥ 1" in capsys.readouterr().err


def test_help_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        bench().main(["--help"])
    assert done.value.code == 0 and "--short-hours" in capsys.readouterr().out
