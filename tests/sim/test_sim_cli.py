"""``spotfleet simulate``: the table, ``--json``, ``--plot`` and ``--policy optimal``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from spotfleet.cli.main import app

from .helpers import trace_file


def write_traces(folder: Path) -> Path:
    folder.mkdir()
    for zone, avail in (
        ("us-east-1a", [1, 1, 0, 0, 1, 1] * 8),
        ("us-east-1b", [0, 1, 1, 1, 1, 0] * 8),
    ):
        tf = trace_file(zone, avail, tick=600, spot=1.0 if zone.endswith("a") else 1.4, on_demand=3.06)
        (folder / f"{zone}.json").write_text(tf.model_dump_json())
    return folder


def test_simulate_prints_a_summary_and_writes_json_and_plot(tmp_path: Path) -> None:
    traces = write_traces(tmp_path / "traces")
    workload = tmp_path / "w.yaml"
    workload.write_text("jobs:\n  - {name: train, work: 2h, deadline: 5h, resources: {gpus: 1}}\n")
    out, png = tmp_path / "r.json", tmp_path / "t.png"
    result = CliRunner().invoke(
        app,
        ["simulate", "--traces", str(traces), "--workload", str(workload), "--policy", "greedy",
         "--json-out", str(out), "--plot", str(png)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "deadline misses" in result.output and "GPU-hours used" in result.output
    doc = json.loads(out.read_text())
    assert doc["policy"] == "greedy" and doc["deadline_misses"] == 0
    assert doc["jobs"][0]["state"] == "succeeded"
    assert 0 < doc["cost"] < doc["on_demand_cost"]
    assert doc["gpu_hours_used"] == 2.0
    # the table's used/paid share is the document's two figures divided
    share = doc["gpu_hours_used"] / doc["gpu_hours_paid"]
    assert 0 < share <= 1
    assert f"{share:.1%}" in result.output.split("GPU-hours used / paid")[1].splitlines()[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_optimal_and_errors(tmp_path: Path) -> None:
    traces = write_traces(tmp_path / "traces")
    one = tmp_path / "one.yaml"
    one.write_text("jobs:\n  - {name: train, work: 2h, deadline: 5h}\n")
    out = tmp_path / "o.json"
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "simulate",
            "--traces",
            str(traces),
            "--workload",
            str(one),
            "--policy",
            "optimal",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["feasible"] and doc["cost"] > 0 and doc["schedule"]
    bad = runner.invoke(app, ["simulate", "--traces", str(traces), "--workload", str(one), "--policy", "nope"])
    assert bad.exit_code == 2 and "unknown policy 'nope'" in bad.output
    typo = tmp_path / "typo.yaml"
    typo.write_text("jobs:\n  - {name: train, work: 2h, resource: {gpus: 1}}\n")
    bad = runner.invoke(app, ["simulate", "--traces", str(traces), "--workload", str(typo), "--policy", "greedy"])
    assert bad.exit_code == 2 and "jobs[0].resource" in bad.output


def test_bundled_traces_and_workloads_run_without_the_reference_data(tmp_path: Path) -> None:
    """`--traces builtin:...` needs nothing outside the package (a bare install)."""
    out = tmp_path / "fleet.json"
    result = CliRunner().invoke(
        app, ["simulate", "--traces", "builtin:gcp-h100", "--workload", "builtin:fleet", "-o", "json",
              "--json-out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == json.loads(out.read_text())
    assert doc["deadline_misses"] == 0 and doc["unfinished"] == 0
    assert 0 < doc["cost"] < doc["on_demand_cost"]
    typo = CliRunner().invoke(app, ["simulate", "--traces", "builtin:gcp-h10", "--workload", "builtin:fleet"])
    assert typo.exit_code == 2 and "did you mean builtin:gcp-h100?" in typo.stderr


def test_every_bundled_set_is_small_valid_and_attributed() -> None:
    from spotfleet.sim import builtin
    from spotfleet.sim.traces import load_traces

    root = Path(__file__).resolve().parents[2] / "spotfleet" / "data" / "traces"
    readme = (root / "README.md").read_text()
    assert "Apache License 2.0" in readme and "skypilot-org/spot-traces" in readme
    assert builtin.trace_sets() == ["aws-v100", "aws-v100-16node", "aws-v100-preemption", "gcp-h100"]
    for name in builtin.trace_sets():
        folder = builtin.resolve_traces(f"builtin:{name}")
        size = sum(p.stat().st_size for p in folder.glob("*.json"))
        assert size < 100_000, f"{name} is {size} bytes: keep samples small"
        traces = load_traces([folder])
        assert len(traces.zones) >= 2
        assert all("sample bundled with spotfleet" in z.source for z in traces.zones)
        assert f"`{name}`" in readme
    examples = Path(__file__).resolve().parents[2] / "examples" / "workload.yaml"
    assert builtin.resolve_workload("builtin:fleet").read_text() == examples.read_text()


def test_history_hours_lets_the_controller_learn_the_traces_before_the_start(tmp_path: Path) -> None:
    # one pool that flapped every 10 min for the 8 h before the start and is up from then on:
    # only a controller given those hours sees the flapping, so the two runs differ
    folder = tmp_path / "traces"
    folder.mkdir()
    flapped = trace_file("us-east-1a", [1, 0] * 24 + [1] * 36, tick=600, spot=1.0, on_demand=3.06)
    (folder / "a.json").write_text(flapped.model_dump_json())
    workload = tmp_path / "w.yaml"
    workload.write_text("start_tick: 48\njobs:\n  - {name: train, work: 2h, deadline: 3h, resources: {gpus: 1}}\n")
    docs = []
    for hours in ("0", "8"):
        result = CliRunner().invoke(
            app, ["simulate", "--traces", str(folder), "--workload", str(workload), "--policy", "spotfleet",
                  "--history-hours", hours, "-o", "json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        docs.append(json.loads(result.stdout))
    assert all(d["deadline_misses"] == 0 and d["jobs"][0]["state"] == "succeeded" for d in docs)
    assert docs[0]["cost"] != docs[1]["cost"], "the history reached the controller"
    bad = CliRunner().invoke(app, ["simulate", "--traces", str(folder), "--workload", str(workload),
                                   "--history-hours", "-1"])  # fmt: skip
    assert bad.exit_code == 2 and "--history-hours" in bad.stderr
