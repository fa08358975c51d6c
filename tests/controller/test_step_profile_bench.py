"""``bench/step_profile.py`` as the README lists it, CI-sized, on both stores:
it builds the state, runs the steps and prints every phase and its JSON line.
Figures are the bench's business; this keeps the command from rotting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_ADMIN

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_step_profile_runs_and_reports_every_phase(database: str) -> None:
    if database == "postgresql" and PG_ADMIN == "off":
        pytest.skip("PostgreSQL disabled by SPOTFLEET_TEST_PG=off")
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "step_profile.py"), "--jobs", "40", "--instances", "8", "--steps", "2",
         "--database", database, "--pg", PG_ADMIN],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    assert doc["database"] == database and doc["jobs"] == 40 and doc["instances"] == 8 and doc["steps"] == 2
    assert doc["pending"] == 40, "the backlog stays pending: no provider sells its GPU"
    for phase in ("step", "load_state", "plan", "commit"):
        assert phase in doc["phases"], phase
    assert doc["step_mean_s"] > 0 and doc["phases"]["step"]["first_s"] > 0
