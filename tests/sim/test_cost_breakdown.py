"""bench/cost_breakdown.py: per start, a policy's hours and dollars beside the optimum's (CI-sized traces)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .helpers import REPO, trace_file
from .test_policy_cost_subsets import write_traces


def test_breakdown_decomposes_each_start_beside_the_optimum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    sys.modules.pop("bench.cost_breakdown", None)
    from bench import cost_breakdown

    traces = write_traces(tmp_path / "traces")
    out = tmp_path / "rows.jsonl"
    code = cost_breakdown.main(
        ["--traces", str(traces), "--subsets", "2", "--only", "us-east-1a,us-west-2a", "--starts", "2",
         "--work-hours", "4", "--deadline-hours", "8", "--json", str(out)]
    )  # fmt: skip
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["zones"] == ["us-east-1a", "us-west-2a"] for r in rows)
    for r in rows:
        mine, best = r["policy"], r["optimal"]
        assert not mine["missed"] and r["ratio"] >= 1.0 - 1e-9  # the optimum is a lower bound
        assert mine["spot_usd"] + mine["od_usd"] == pytest.approx(mine["cost"])
        assert best["spot_usd"] + best["od_usd"] == pytest.approx(best["cost"])
        # every hour up to the finish is paid or waited (two instances at once count once)
        paid = mine["spot_h"] + mine["od_h"] - mine["overlap_h"]
        assert paid + mine["waited_h"] >= mine["finish_h"] - 1e-6
        assert mine["segments"] and all(s["market"] in ("spot", "on_demand") for s in mine["segments"])
        assert mine["slack_left_h"] == pytest.approx(8 - mine["finish_h"]) and mine["slack_left_h"] >= 0
        # on-demand bought while spot was up, and the last stretch, are parts of the on-demand hours
        assert 0 <= mine["od_h_with_spot_up"] <= mine["od_h"] + 0.5 and 0 <= mine["od_h_last_stretch"] <= mine["od_h"]
        assert best["slack_left_h"] == pytest.approx(8 - best["finish_h"]) and best["slack_left_h"] >= -1e-9
        # the last instance waits out the idle TTL (300 s) after the finish: billed, and within the run's cost
        assert 0 < mine["billed_after_finish_usd"] < mine["cost"]
    printed = capsys.readouterr().out
    assert "us-east-1a,us-west-2a: ratio" in printed
    summary = json.loads(printed.strip().splitlines()[-1])
    assert summary["starts"] == 2
    gaps = summary["gap_usd_by_slack_left_h"]
    # every start's extra dollars land in one band, so the bands add up to the whole gap
    assert sum(gaps.values()) == pytest.approx(sum(r["policy"]["cost"] - r["optimal"]["cost"] for r in rows), abs=0.02)
    assert summary["policy_mean_h"] == pytest.approx(sum(r["policy"]["slack_left_h"] for r in rows) / 2)
    tail = sum(r["policy"]["billed_after_finish_usd"] for r in rows)
    assert summary["billed_after_finish_usd"] == pytest.approx(tail, abs=0.01)
    assert "billed after the job finished" in printed


def test_on_demand_without_spot_counts_as_a_last_stretch_not_as_spot_forgone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    sys.modules.pop("bench.cost_breakdown", None)
    from bench import cost_breakdown
    from spotfleet.sim.traces import load_traces

    folder = tmp_path / "never"
    folder.mkdir()
    for zone in ("us-east-1a", "us-west-2a"):
        (folder / f"{zone}.json").write_text(trace_file(zone, [0] * 40, tick=1800, on_demand=3.06).model_dump_json())
    row = cost_breakdown.policy_breakdown(
        load_traces([folder]), "spotfleet", 0, work=4, deadline=8, restart=0.2, ckpt_min=30
    )
    # no spot anywhere: one on-demand instance runs the job to the end, and none of it was spot forgone
    assert row["od_h"] > 4 and row["spot_h"] == 0
    assert row["od_h_with_spot_up"] == 0
    assert row["od_h_last_stretch"] == pytest.approx(row["od_h"])
    # the on-demand instance is kept for the idle TTL after the finish: at least 300 s at $3.06/h
    assert row["billed_after_finish_usd"] >= 300 / 3600 * 3.06 - 1e-6


def test_only_that_names_no_subset_is_an_error_not_an_empty_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Zones given space-separated (or a subset of another size than
    ``--subsets``) used to run nothing and exit 0."""
    monkeypatch.syspath_prepend(str(REPO))
    sys.modules.pop("bench.cost_breakdown", None)
    from bench import cost_breakdown

    traces = write_traces(tmp_path / "traces")
    with pytest.raises(SystemExit) as exc:
        cost_breakdown.main(["--traces", str(traces), "--subsets", "2", "--only", "us-east-1a", "us-west-2a"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--only us-east-1a us-west-2a names no subset of 2" in err and "comma-separated" in err
