"""bench/slack_need.py: the slack a spot-only path spends, start by start (hand-made traces)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from .helpers import REPO
from .test_policy_cost_subsets import write_traces


def _bench(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.syspath_prepend(str(REPO))
    sys.modules.pop("bench.slack_need", None)
    from bench import slack_need

    return slack_need


def test_a_reclaim_costs_a_restart_and_an_outage_its_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench(monkeypatch)
    up = np.array([[1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1, 1]], dtype=bool)
    # tick 0: start in zone 0 (restart 0.5 h); 1: work; 2: reclaimed, nothing up (wait);
    # 3: start in zone 1 (restart); 4: the last half hour of work
    assert b.spot_only_need(up, 0, work_h=1.0, restart_h=0.5, tick_h=0.5) == (1.5, 2)
    # from tick 3 nothing is lost: one start, then work
    assert b.spot_only_need(up, 3, work_h=1.0, restart_h=0.5, tick_h=0.5) == (0.5, 1)
    # a restart shorter than a tick is paid within it: the rest of the tick is work
    assert b.spot_only_need(up, 3, work_h=1.0, restart_h=0.2, tick_h=0.5) == pytest.approx((0.2, 1))


def test_prints_the_spread_and_one_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    b = _bench(monkeypatch)
    traces = write_traces(tmp_path / "traces")
    code = b.main(["--traces", str(traces), "--subsets", "2", "--starts", "3", "--work-hours", "4",
                   "--deadline-hours", "8", "--restart-hours", "0.5"])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out.strip().splitlines()
    line = json.loads(out[-1])
    assert line["subsets"] == 3 and line["runs"] == 9
    assert line["slack_h"] == pytest.approx(3.5)
    # every start pays at least its first restart; the shares are shares
    assert line["mean_spent_h"] >= 0.5 and line["mean_starts"] >= 1
    assert 0.0 <= line["share_over_slack"] <= 1.0
    assert "a spot-only path spends" in out[0]


def test_rejects_a_deadline_inside_the_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench(monkeypatch)
    with pytest.raises(SystemExit):
        b.main(["--traces", str(write_traces(tmp_path / "traces")), "--work-hours", "8", "--deadline-hours", "8"])


def test_help_prints_the_usage(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as stop:
        _bench(monkeypatch).main(["--help"])
    assert stop.value.code == 0 and "spot-only path" in capsys.readouterr().out
