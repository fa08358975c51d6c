"""bench/joint_outages.py: joint outages of zone subsets against independent ones, on hand-made zones."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from .helpers import load_bench, trace_file


def bench() -> ModuleType:
    return load_bench("joint_outages")


def _write(folder: Path, zones: dict[str, list[int]]) -> Path:
    folder.mkdir(parents=True)
    for zone, avail in zones.items():
        (folder / f"{zone}.json").write_text(trace_file(zone, avail, tick=1800).model_dump_json())
    return folder


# half-hour ticks: outages of 1.0, 0.5 and 1.5 h, each ended inside the trace
TOGETHER = [1, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1]


def test_zones_that_go_down_together_come_back_twice_as_late_as_independence_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two zones with the same outages: each zone's mean down run is 1.0 h, so independent
    # zones would give the first one back after 1 / (1/1 + 1/1) = 0.5 h; together, 1.0 h
    folder = _write(tmp_path / "together", {"us-east-1a": TOGETHER, "us-east-1b": TOGETHER})
    assert bench().main([str(folder), "--sizes", "2"]) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert line["zones"] == 2
    assert line["k2"] == {"subsets": 1, "median": 2.0, "mean": 2.0, "min": 2.0, "max": 2.0}


def test_zones_never_down_at_once_have_no_joint_outage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = [0 if up else 1 for up in TOGETHER[:-1]] + [1]  # down exactly when the first is up (but at the end)
    folder = _write(tmp_path / "apart", {"us-east-1a": TOGETHER, "us-east-1b": other})
    assert bench().main([str(folder), "--sizes", "2"]) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert "k2" not in line


def test_the_ratio_counts_only_subsets_with_enough_joint_outages() -> None:
    import numpy as np

    up = np.array(TOGETHER) > 0
    zones = {"a": up, "b": up.copy()}
    assert bench().joint_ratios(zones, 0.5, 2, 3) == [pytest.approx(2.0)]
    assert bench().joint_ratios(zones, 0.5, 2, 4) == []  # three joint outages, four asked for


def test_a_subset_size_under_two_is_refused(tmp_path: Path) -> None:
    folder = _write(tmp_path / "one", {"us-east-1a": TOGETHER})
    with pytest.raises(SystemExit) as exc:
        bench().main([str(folder), "--sizes", "1"])
    assert exc.value.code == 2


def test_help_names_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench().main(["--help"])
    assert exc.value.code == 0
    assert "independent" in capsys.readouterr().out
