"""The command line: bad input is one line on stderr and exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotfleet.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: a\ncommand: [oops\n", "malformed YAML"),
        ("name: a\ncommand: x\ncolour: red\n", "colour: unknown field"),
        ("name: a\ncommand: x\nresources: {gpus: -2}\n", "resources.gpus:"),
        ("name: a\ncommand: x\npriority: urgent\n", "priority:"),
    ],
)
def test_submit_rejects_bad_specs_with_one_line_and_exit_2(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["submit", str(path), "--api", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and needle in lines[0]


def test_examples_validate(tmp_path: Path) -> None:
    examples = sorted(Path(__file__).resolve().parents[2].joinpath("examples").glob("*.yaml"))
    job_specs = [p for p in examples if not p.name.startswith(("workload", "config"))]
    assert job_specs, "examples/ holds job specs"
    result = runner.invoke(app, ["submit", "--dry-run", *map(str, job_specs)])
    assert result.exit_code == 0, result.output


def test_unreachable_controller_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["jobs", "--api", "http://127.0.0.1:9"])
    assert result.exit_code == 1 and "cannot reach the controller" in result.stderr


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip()
