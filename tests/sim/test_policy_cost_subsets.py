"""bench/policy_cost.py --subsets: every K-zone subset is its own market, with
mean and worst ratio to the optimum per policy (CI-sized: 3 hand-made zones)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from .helpers import load_bench, trace_file


def bench() -> ModuleType:
    return load_bench("policy_cost")


def write_traces(folder: Path) -> Path:
    folder.mkdir()
    for zone, avail, spot in (
        ("us-east-1a", [1, 1, 0, 0, 1, 1] * 10, 1.0),
        ("us-east-1b", [0, 1, 1, 1, 1, 0] * 10, 1.4),
        ("us-west-2a", [1, 0, 1, 0, 1, 1] * 10, 0.8),
    ):
        tf = trace_file(zone, avail, tick=1800, spot=spot, on_demand=3.06)
        (folder / f"{zone}.json").write_text(tf.model_dump_json())
    return folder


def test_subset_list_is_every_combination_or_an_even_sample() -> None:
    b = bench()
    zones = ["a", "b", "c", "d", "e"]
    every = b.subset_list(zones, 3)
    assert len(every) == 10 and every[0] == ("a", "b", "c") and every[-1] == ("c", "d", "e")
    sample = b.subset_list(zones, 3, limit=4)
    assert len(sample) == 4 and len(set(sample)) == 4 and set(sample) <= set(every)


def test_subsets_mode_reports_mean_and_worst_per_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = write_traces(tmp_path / "traces")
    code = bench().main(
        ["--traces", str(traces), "--subsets", "2", "--starts", "2", "--work-hours", "4", "--deadline-hours", "8",
         "--policies", "greedy", "spotfleet", "--history-hours", "2"]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "3 of 3 2-zone subsets" in out and "worst subset" in out
    assert all(json.loads(line)["history_hours"] == 2.0 for line in out.splitlines() if line.startswith("{"))
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    by = {d["policy"]: d for d in lines}
    assert set(by) == {"optimal", "greedy", "spotfleet"}
    for d in lines:
        assert d["mode"] == "subsets" and d["subsets"] == 3 and d["runs"] == 6 and d["k"] == 2
        assert d["worst_subset_ratio"] >= d["mean_ratio"] > 0
        assert d["worst_start_ratio"] >= d["worst_subset_ratio"] - 1e-9
    assert by["optimal"]["mean_ratio"] == pytest.approx(1.0) and by["optimal"]["deadline_misses"] == 0
    for p in ("greedy", "spotfleet"):
        assert by[p]["mean_ratio"] >= 1.0 - 1e-9  # nothing beats the omniscient optimum


def test_hazard_prior_is_passed_to_spotfleet_and_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The held-out protocol's ``--hazard-prior`` (docs/simulator.md): spotfleet plans
    with it, and every JSON line records it."""
    traces = write_traces(tmp_path / "traces")
    argv = ["--traces", str(traces), "--subsets", "3", "--starts", "2", "--work-hours", "4", "--deadline-hours", "8",
            "--policies", "spotfleet"]  # fmt: skip

    def spotfleet_line(*extra: str) -> dict[str, object]:
        assert bench().main([*argv, *extra]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        return next(d for d in lines if d["policy"] == "spotfleet")

    before, after = tmp_path / "default.jsonl", tmp_path / "flaky.jsonl"
    default = spotfleet_line("--runs-out", str(before))
    flaky = spotfleet_line("--hazard-prior", "20", "--runs-out", str(after))
    assert default["hazard_prior"] is None and flaky["hazard_prior"] == 20.0
    assert flaky["mean_ratio"] != default["mean_ratio"]  # 20 reclaims/h expected: it plans otherwise
    # the two runs files, compared start by start, give the bench's own ratios back
    assert compare_bench().main([str(before), str(after), "--policy", "spotfleet"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["runs"] == 2 and line["dearer"] + line["cheaper"] >= 1
    assert line["mean_ratio_before"] == pytest.approx(default["mean_ratio"], abs=1e-4)
    assert line["mean_ratio_after"] == pytest.approx(flaky["mean_ratio"], abs=1e-4)
    with pytest.raises(SystemExit) as bad:
        bench().main([*argv, "--hazard-prior", "0"])
    assert bad.value.code == 2 and "--hazard-prior 0: give interruptions per instance-hour" in capsys.readouterr().err


def _trace_set(folder: Path, cloud: str, zones: dict[str, list[int]]) -> Path:
    folder.mkdir(parents=True)
    for zone, avail in zones.items():
        tf = trace_file(zone, avail, tick=1800, cloud=cloud, instance_type="a3" if cloud == "gcp" else "p3.2xlarge")
        (folder / f"{zone}.json").write_text(tf.model_dump_json())
    return folder


def test_held_out_prior_is_the_loss_rate_of_the_other_sets_of_the_cloud(tmp_path: Path) -> None:
    """``--hazard-prior held-out``: a set is judged with the spot loss rate of the
    sets beside it, of its own cloud when there are any, else of all of them."""
    root = tmp_path / "traces"
    judged = _trace_set(root / "aws-judged", "aws", {"us-east-1a": [1, 0] * 6})  # its own rate is never read
    # 2 losses in 4 available half-hours (1, 1, 0, 1, 1, 0) and 1 in 3 h (six up, then down): 3 losses / 5 h
    _trace_set(root / "aws-other", "aws", {"us-east-1b": [1, 1, 0, 1, 1, 0], "us-west-2a": [1] * 6 + [0]})
    _trace_set(root / "gcp-set", "gcp", {"us-central1-a": [1, 0, 0, 0]})  # 1 loss in 0.5 h
    b = bench()
    rate, pooled = b.held_out_prior([str(judged)])
    assert pooled == ["aws-other"] and rate == pytest.approx(3 / 5.0)
    # a GCP set with no other GCP set beside it: every other set, pooled
    rate, pooled = b.held_out_prior([str(root / "gcp-set")])
    assert pooled == ["aws-judged", "aws-other"] and rate == pytest.approx((6 + 3) / (3.0 + 5.0))
    lonely = _trace_set(tmp_path / "alone" / "only", "aws", {"us-east-1a": [1, 0]})
    with pytest.raises(ValueError, match="no other trace set"):
        b.held_out_prior([str(lonely)])


def test_held_out_prior_runs_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "traces"
    root.mkdir()
    judged = write_traces(root / "aws-judged")
    _trace_set(root / "aws-other", "aws", {"us-east-1b": [1, 1, 0, 1, 1, 0]})  # 2 losses / 2 h
    assert bench().main(["--traces", str(judged), "--subsets", "3", "--starts", "1", "--work-hours", "4",
                         "--deadline-hours", "8", "--policies", "spotfleet", "--hazard-prior", "held-out"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "hazard prior (held out): 1.0000/h, the spot loss rate of aws-other" in out
    assert {json.loads(line)["hazard_prior"] for line in out.splitlines() if line.startswith("{")} == {1.0}
    with pytest.raises(SystemExit):
        bench().main(["--traces", str(judged), "--hazard-prior", "often"])
    assert "'often': give a rate per instance-hour or 'held-out'" in capsys.readouterr().err


def test_help_names_the_held_out_prior(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        bench().main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "--hazard-prior" in out and "held-out" in out


def test_subsets_larger_than_the_zones_is_an_error(tmp_path: Path) -> None:
    traces = write_traces(tmp_path / "traces")
    assert bench().main(["--traces", str(traces), "--subsets", "4", "--starts", "1"]) == 2


def test_checkpoint_gb_and_the_ups_baseline_as_the_readme_runs_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's leave-zones-out command with ``--checkpoint-gb 50`` and ``ups``
    (CI-sized): one JSON line per policy carrying the condition, none below the optimum."""
    traces = write_traces(tmp_path / "traces")
    code = bench().main(
        ["--traces", str(traces), "--subsets", "2", "--starts", "2", "--work-hours", "4", "--deadline-hours", "8",
         "--checkpoint-gb", "50", "--policies", "greedy", "ups"]
    )  # fmt: skip
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    by = {d["policy"]: d for d in lines}
    assert set(by) == {"optimal", "greedy", "ups"}
    assert all(d["checkpoint_gb"] == 50.0 for d in lines)
    assert by["ups"]["mean_ratio"] >= 1.0 - 1e-9 and by["ups"]["deadline_misses"] == 0


def compare_bench() -> ModuleType:
    return load_bench("compare_runs")


def test_runs_out_writes_every_run_and_names_the_worst_subset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--runs-out``: one JSON line per run with the optimum's cost on the same
    start; the summary's mean and worst subset are those of the file's runs, and
    the worst subset is named. Progress goes to stderr, ending at the last run."""
    traces = write_traces(tmp_path / "traces")
    runs_file = tmp_path / "runs.jsonl"
    argv = ["--traces", str(traces), "--subsets", "2", "--starts", "2", "--work-hours", "4", "--deadline-hours", "8",
            "--policies", "greedy", "spotfleet", "--runs-out", str(runs_file)]  # fmt: skip
    assert bench().main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1].startswith("runs 18/18, ")  # 3 subsets × 3 policies × 2 starts
    rows = [json.loads(line) for line in runs_file.read_text().splitlines()]
    assert len(rows) == 18 and {r["policy"] for r in rows} == {"optimal", "greedy", "spotfleet"}
    assert {r["zones"] for r in rows} == {"us-east-1a+us-east-1b", "us-east-1a+us-west-2a", "us-east-1b+us-west-2a"}
    for r in rows:
        assert r["ratio"] == pytest.approx(r["cost"] / r["optimal_cost"], rel=1e-5)
        if r["policy"] == "optimal":
            assert r["ratio"] == pytest.approx(1.0) and r["spot_share"] is None
    summary = {d["policy"]: d for d in (json.loads(x) for x in captured.out.splitlines() if x.startswith("{"))}
    for policy in ("greedy", "spotfleet"):
        by_subset: dict[str, float] = {}
        for zones in {r["zones"] for r in rows}:
            mine = [r for r in rows if r["policy"] == policy and r["zones"] == zones]
            by_subset[zones] = sum(r["cost"] for r in mine) / sum(r["optimal_cost"] for r in mine)
        worst = max(by_subset, key=lambda z: by_subset[z])
        assert summary[policy]["worst_subset"] == worst
        assert summary[policy]["worst_subset_ratio"] == pytest.approx(by_subset[worst], abs=1e-4)
        assert summary[policy]["mean_ratio"] == pytest.approx(sum(by_subset.values()) / 3, abs=1e-4)
        assert worst in captured.out  # the table names it too


def _write_runs(path: Path, rows: list[tuple[str, str, int, float, float | None, bool]]) -> Path:
    path.write_text("".join(
        json.dumps({"zones": z, "policy": p, "start_tick": t, "cost": c, "optimal_cost": o, "missed": m}) + "\n"
        for z, p, t, c, o, m in rows
    ))  # fmt: skip
    return path


def test_compare_runs_counts_dearer_and_cheaper_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _write_runs(tmp_path / "before.jsonl", [
        ("a+b", "spotfleet", 0, 10.0, 8.0, False), ("a+b", "spotfleet", 5, 12.0, 10.0, False),
        ("a+c", "spotfleet", 0, 20.0, 10.0, False), ("a+c", "greedy", 0, 30.0, 10.0, False),
        ("b+c", "spotfleet", 0, 9.0, 9.0, False),  # only in before: not compared
    ])  # fmt: skip
    after = _write_runs(tmp_path / "after.jsonl", [
        ("a+b", "spotfleet", 0, 9.0, 8.0, False), ("a+b", "spotfleet", 5, 12.00001, 10.0, False),
        ("a+c", "spotfleet", 0, 25.0, 10.0, True), ("a+c", "greedy", 0, 30.0, 10.0, False),
    ])  # fmt: skip
    cmp = compare_bench()
    assert cmp.main([str(before), str(after), "--policy", "spotfleet", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "3 runs in both files: 1 dearer, 1 cheaper, 1 unchanged" in out
    assert "a+c spotfleet 0: $20.00 → $25.00 (+5.00)" in out
    line = json.loads(out.strip().splitlines()[-1])
    assert line["total_before"] == pytest.approx(42.0) and line["total_after"] == pytest.approx(46.00001)
    # subset ratios: a+b 22/18 → 21.00001/18, a+c 2.0 → 2.5
    assert line["mean_ratio_before"] == pytest.approx((22 / 18 + 2.0) / 2, abs=1e-4)
    assert line["worst_subset_after"] == pytest.approx(2.5) and (line["misses_before"], line["misses_after"]) == (0, 1)
    assert cmp.main([str(before), str(after)]) == 0  # every policy: greedy's start is unchanged
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["runs"] == 4


def test_compare_runs_rejects_what_it_cannot_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cmp = compare_bench()
    good = _write_runs(tmp_path / "good.jsonl", [("a", "spotfleet", 0, 1.0, None, False)])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"zones": "a", "policy": "spotfleet", "start_tick": 0, "cost": 1.0, "missed": False})
                   + "\n{\"zones\": \"a\"}\n")  # fmt: skip
    with pytest.raises(SystemExit) as err:
        cmp.main([str(good), str(bad)])
    assert err.value.code == 2 and f"{bad}:2: not a run of bench/policy_cost.py --runs-out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cmp.main([str(good), str(tmp_path / "missing.jsonl")])
    assert "cannot read" in capsys.readouterr().err
    assert cmp.main([str(good), str(good), "--policy", "greedy"]) == 1
    assert "no run is in both files for policy 'greedy'" in capsys.readouterr().err
    assert cmp.main([str(good), str(good)]) == 0  # no optimum costs: ratios are unknown, not made up
    out = capsys.readouterr().out
    assert "mean subset ratio — → —" in out and json.loads(out.strip().splitlines()[-1])["mean_ratio_before"] is None
    with pytest.raises(SystemExit) as help_:
        cmp.main(["--help"])
    assert help_.value.code == 0 and "--runs-out" in capsys.readouterr().out


def test_checkpoint_seconds_is_the_jobs_save_time_against_the_notice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--checkpoint-seconds`` (docs/simulator.md): how long the job's save takes. On
    GCP's 30 s notice a 60 s save loses the work since the periodic checkpoint at
    every reclaim, so greedy pays for more hours than with a 20 s save; every JSON
    line records it, and a negative time is refused."""
    traces = _trace_set(tmp_path / "gcp", "gcp", {"us-central1-a": [1, 1, 1, 0] * 6, "us-central1-b": [0, 1, 1, 1] * 6})
    argv = ["--traces", str(traces), "--starts", "1", "--work-hours", "4", "--deadline-hours", "10",
            "--checkpoint-minutes", "60", "--policies", "greedy"]  # fmt: skip

    def greedy_line(seconds: str) -> dict[str, object]:
        assert bench().main([*argv, "--checkpoint-seconds", seconds]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        assert all(d["checkpoint_seconds"] == float(seconds) for d in lines)
        return next(d for d in lines if d["policy"] == "greedy")

    fits, too_long = greedy_line("20"), greedy_line("60")
    assert float(too_long["mean_cost"]) > float(fits["mean_cost"])  # type: ignore[arg-type]
    with pytest.raises(SystemExit) as bad:
        bench().main([*argv, "--checkpoint-seconds", "-1"])
    assert bad.value.code == 2 and "--checkpoint-seconds -1: give seconds from 0 to 3600" in capsys.readouterr().err


def test_every_tick_steps_the_controller_at_every_tick_and_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--every-tick`` (docs/simulator.md, "Skipping quiet ticks"): the simulator
    steps at every trace tick instead of jumping over quiet ones; every JSON line
    says which it was, in both modes."""
    module = bench()
    seen: list[bool] = []
    real = module.run_single_job

    def watching(*args: object, **kwargs: object) -> object:
        seen.append(kwargs["settings"].skip_quiet)  # type: ignore[attr-defined]
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "run_single_job", watching)
    argv = ["--traces", str(write_traces(tmp_path / "t")), "--starts", "1", "--work-hours", "4",
            "--deadline-hours", "10", "--policies", "greedy"]  # fmt: skip
    for extra, skip in (([], True), (["--every-tick"], False), (["--every-tick", "--subsets", "2"], False)):
        seen.clear()
        assert module.main([*argv, *extra]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        assert seen and set(seen) == {skip}, "every run gets the setting"
        assert lines and all(d["every_tick"] is not skip for d in lines)
    with pytest.raises(SystemExit) as help_:
        module.main(["--help"])
    assert help_.value.code == 0 and "--every-tick" in capsys.readouterr().out
