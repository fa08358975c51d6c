"""The output convention (docs/cli.md): plain columns with whole ids when piped,
json/yaml carrying the same data, --watch framing, progress text, errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from spotfleet.cli import output, watch
from spotfleet.cli.jobs import jobs_view, progress_text
from spotfleet.cli.main import app

JOB = {
    "id": "job-0123456789abcdef0123456789", "name": "a-rather-long-job-name-that-would-wrap-in-a-narrow-table",
    "tenant": "research", "priority": "opportunistic", "state": "running", "gpus": 1, "nodes": 1, "attempt": 2,
    "interruptions": 1, "instances": ["sf-aaaaaaaaaaaaaaaaaaaa"], "created_at": "2026-12-01T00:00:00+00:00",
    "deadline": None, "message": "x" * 200, "progress": {"step": 120, "extra": {"total_steps": 300}},
}  # fmt: skip


def test_piped_tables_keep_whole_ids_and_values() -> None:
    text = jobs_view([JOB], False).plain(wide=False)
    header, row = text.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "TENANT"]
    assert row.split()[0] == JOB["id"] and JOB["name"] in row
    assert "120/300 40%" in row
    assert ("x" * 60) in row and ("x" * 61) not in row, "table: the message is cut; ids never are"
    wide = jobs_view([JOB], True).plain(wide=True)
    assert "x" * 200 in wide and "sf-aaaaaaaaaaaaaaaaaaaa" in wide and "INTERRUPTIONS" in wide


def test_json_and_yaml_carry_the_same_data() -> None:
    as_json = json.loads(output.render([JOB], output.Format.json))
    as_yaml = yaml.safe_load(output.render([JOB], output.Format.yaml))
    assert as_json == as_yaml == [JOB]


@pytest.mark.parametrize(
    ("progress", "text"),
    [
        ({}, "-"),
        ({"step": 5}, "step 5"),
        ({"step": 30, "total_steps": 120}, "30/120 25%"),
        ({"fraction": 0.5}, "50%"),
        ({"extra": {"fraction": 0.25}}, "25%"),
    ],
)
def test_progress_text(progress: dict[str, object], text: str) -> None:
    assert progress_text(progress) == text


def _frames(count: int) -> Iterator[list[dict[str, object]]]:
    for n in range(count):
        yield [{**JOB, "attempt": n}]
    raise KeyboardInterrupt  # Ctrl-C after `count` refreshes


def test_watch_appends_json_lines_and_plain_frames(capsys: pytest.CaptureFixture[str]) -> None:
    frames = _frames(3)
    watch.watch(lambda: next(frames), output.Format.json, jobs_view, interval=0.01)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)[0]["attempt"] for line in lines] == [0, 1, 2]
    frames = _frames(2)
    watch.watch(lambda: next(frames), output.Format.table, jobs_view, interval=0.01)
    out = capsys.readouterr().out
    assert out.count("\n# ") + out.startswith("# ") == 2 and out.count(JOB["id"]) == 2


def test_bad_specs_report_every_problem_as_the_readme_shows(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: a\ncommand: x\nresources: {gpus: -1, gpu_typs: [V100]}\n")
    result = CliRunner().invoke(app, ["submit", str(bad), "--api", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {bad}: resources.gpus: Input should be greater than or equal to 0 (got -1)",
        f"error: {bad}: resources.gpu_typs: unknown field; did you mean 'gpu_types'? see "
        "docs/reference.md#job-spec for the valid keys",
    ]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for line in result.stderr.splitlines():
        assert line.replace(str(bad), "bad.yaml") in readme


def test_config_typo_points_to_the_config_reference(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reconcle: {interval: 1s}\nproviders: {aws: {regoins: [us-east-1]}}\n")
    result = CliRunner().invoke(app, ["cost", "report", "--config", str(cfg)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {cfg}: reconcle: unknown field; did you mean 'reconcile'? see docs/reference.md#config for the "
        "valid keys",
        f"error: {cfg}: providers.aws.regoins: unknown field; did you mean 'regions'? see docs/aws.md for the "
        "valid keys",
    ]


@pytest.mark.parametrize(
    ("url", "code", "needle"),
    [
        ("nonsense", 2, "cannot read the URL 'nonsense'"),
        ("mysql://u@h/db", 2, "unsupported database 'mysql'"),
        (
            "postgresql://u:hunter2@127.0.0.1:1/db",
            1,
            "cannot use the database postgresql+psycopg://u:***@127.0.0.1:1/db",
        ),
    ],
)
def test_database_problems_are_one_line(url: str, code: int, needle: str) -> None:
    result = CliRunner().invoke(app, ["cost", "report", "--db", url])
    assert result.exit_code == code
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "hunter2" not in result.stderr
