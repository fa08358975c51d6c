"""bench/slack_need.py: the slack a spot-only path spends, start by start (hand-made traces)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from .helpers import REPO, trace_file
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
    path = b.spot_only_need(up, 0, work_h=1.0, restart_h=0.5, tick_h=0.5)
    # held on spot at ticks 0, 1, 3, 4; one reclaim (at tick 2)
    assert (path.spent_h, path.starts, path.spot_h, path.reclaims) == (1.5, 2, 2.0, 1)
    # from tick 3 nothing is lost: one start, then work; no reclaim
    path = b.spot_only_need(up, 3, work_h=1.0, restart_h=0.5, tick_h=0.5)
    assert (path.spent_h, path.starts, path.spot_h, path.reclaims) == (0.5, 1, 1.5, 0)
    # a restart shorter than a tick is paid within it: the rest of the tick is work
    path = b.spot_only_need(up, 3, work_h=1.0, restart_h=0.2, tick_h=0.5)
    assert (path.spent_h, path.starts) == pytest.approx((0.2, 1))


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
    assert line["reclaims_per_spot_h"] is not None and line["reclaims_per_spot_h"] >= 0.0
    assert "a spot-only path spends" in out[0] and "reclaims met per hour on spot" in out[1]


def test_the_reclaim_rate_is_reclaims_over_hours_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zone up 1 h, down 1 h, over and over, with 30-minute ticks: 4 h of
    work take four 1 h runs, and the last one ends with the work, not a
    reclaim: 3 reclaims over 4 h held. The bench pools that per start."""
    b = _bench(monkeypatch)
    pattern = [1, 1, 0, 0] * 40
    path = b.spot_only_need(np.array([pattern], dtype=bool), 0, work_h=4.0, restart_h=0.0, tick_h=0.5)
    assert (path.starts, path.reclaims, path.spot_h) == (4, 3, 4.0)
    folder = tmp_path / "flapping"
    folder.mkdir()
    (folder / "us-east-1a.json").write_text(
        trace_file("us-east-1a", pattern, tick=1800, on_demand=3.06).model_dump_json()
    )
    # one start, at tick 0 (up): the same 3 reclaims over 4 h held
    assert b.main(["--traces", str(folder), "--starts", "1", "--work-hours", "4", "--deadline-hours", "8",
                   "--restart-hours", "0"]) == 0  # fmt: skip
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["reclaims_per_spot_h"] == pytest.approx(0.75)


def test_rejects_a_deadline_inside_the_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b = _bench(monkeypatch)
    with pytest.raises(SystemExit):
        b.main(["--traces", str(write_traces(tmp_path / "traces")), "--work-hours", "8", "--deadline-hours", "8"])


def test_help_prints_the_usage(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as stop:
        _bench(monkeypatch).main(["--help"])
    assert stop.value.code == 0 and "spot-only path" in capsys.readouterr().out
