"""``bench/plan_scale.py`` as the README lists it, CI-sized: the default
snapshot and the mass-requeue one (every pending job resuming a located
checkpoint). Figures are the bench's business; this keeps the command from
rotting and checks that every job of the snapshot is planned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "plan_scale.py"), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)  # fmt: skip


@pytest.mark.parametrize("share", ["0", "1"])
def test_plan_scale_plans_every_job_with_and_without_located_checkpoints(share: str) -> None:
    run = _bench("--jobs", "300", "--instances", "60", "--repeat", "1", "--located-share", share)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    (row,) = doc["rows"]
    assert row["jobs"] == row["pending"] == 300 and row["instances"] == 60
    assert row["located_checkpoints"] == (300 if share == "1" else 0)
    assert row["commands"]["Bind"] == 300, "every pending job is placed on the full catalog"
    assert 0 < row["commands"]["Launch"] <= 300
    assert row["seconds"] > 0 and row["plan_seconds"] > 0


def test_plan_scale_rejects_a_share_outside_zero_to_one() -> None:
    run = _bench("--located-share", "2")
    assert run.returncode == 2 and "--located-share 2.0: give a share between 0 and 1" in run.stderr


def test_plan_scale_help_names_the_located_share() -> None:
    run = _bench("--help")
    assert run.returncode == 0 and "--located-share" in run.stdout
