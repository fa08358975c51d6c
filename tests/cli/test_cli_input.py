"""Every bad file or environment problem is one ``error:`` line and exit 2 (issue 16)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotfleet.cli.main import app

runner = CliRunner()
NOWHERE = "http://127.0.0.1:1"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"name: a\ncommand: x\nmax_price_per_hour: .inf\n", "max_price_per_hour: Input should be a finite number"),
        (b"name: a\ncommand: x\nexpected_duration: 1.0e+20\n", "expected_duration: a duration is at most 365 days"),
        (b"name: a\ncommand: x\ncheckpoint: {interval: .inf}\n", "checkpoint.interval: a duration"),
        (b"name: a\ncommand: x\nlabels: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
        (b"name: a\ncommand: \xff\xfe\n", "not UTF-8 text"),
        (b"name: a\ncommand: x\ncheckpoint: {signal: SIGKILL}\n", "not a signal a job can catch"),
    ],
)
def test_bad_spec_files_are_one_line_and_exit_2(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(content)
    result = runner.invoke(app, ["submit", str(path), "--api", NOWHERE])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"api:\n  port: \xff\n", "not UTF-8 text"), (b"x: " + b"[" * 5000 + b"]" * 5000, "nested too deeply")],
)
def test_bad_config_files_are_one_line_and_exit_2(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    result = runner.invoke(app, ["cost", "report", "--config", str(path)])
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_a_whitespace_token_in_the_environment_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTFLEET_API_TOKEN", "   ")
    result = runner.invoke(app, ["cost", "report", "--db", f"sqlite:///{tmp_path / 'x.db'}"])
    assert result.exit_code == 2 and "empty or whitespace" in result.output
