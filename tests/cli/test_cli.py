"""The command line: bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import itertools
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


def test_submit_of_many_files_is_one_batch_request(tmp_path: Path) -> None:
    """Three files → one ``POST /v1/jobs/batch``: one transaction, stored in order."""
    from spotfleet.config import load_config
    from spotfleet.service import Service

    cfg = load_config(overrides={"data_dir": str(tmp_path / "data"), "api.port": 0})
    service = Service(cfg)
    service.start_background()
    try:
        paths = []
        for i in range(3):
            paths.append(tmp_path / f"j{i}.yaml")
            paths[-1].write_text(f"name: j{i}\ncommand: 'true'\nresources: {{gpu_types: [B300]}}\n")
        result = runner.invoke(app, ["submit", *map(str, paths), "--api", service.url, "-o", "json"])
        assert result.exit_code == 0, result.output
        jobs = service.store.list_jobs()
        assert [j.spec.name for j in jobs] == ["j0", "j1", "j2"]
        gaps = {(b.created_at - a.created_at).total_seconds() for a, b in itertools.pairwise(jobs)}
        assert gaps == {1e-6}, "one batch: the same instant, a microsecond apart"
    finally:
        service.stop()
