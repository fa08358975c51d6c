"""``bench/fleet_load.py`` as the README runs it, CI-sized: a real ``spotfleet up``
on PostgreSQL, submissions one by one and batched, agents heartbeating over HTTP,
then a listing. Figures are the bench's business; this checks that every phase
ran and reported, so the command in the README cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_ADMIN

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workers", [0, 2])
def test_fleet_load_runs_every_phase_and_prints_its_json_line(workers: int) -> None:
    if PG_ADMIN == "off":
        pytest.skip("PostgreSQL disabled by SPOTFLEET_TEST_PG=off")
    args = ["--jobs", "40", "--single", "5", "--batch", "20", "--agents", "4", "--every", "0.5", "--seconds", "2",
            "--pg", PG_ADMIN, "--api-workers", str(workers)]  # fmt: skip
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fleet_load.py"), *args],
        capture_output=True, text=True, timeout=110, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    assert doc["jobs"] == 40 and doc["agents"] == 4
    assert doc["submit_single_per_s"] > 0 and doc["submit_batched_per_s"] > 0
    assert doc["heartbeats"] > 0 and doc["heartbeat_errors"] == 0
    assert 0 < doc["heartbeat_p50_ms"] <= doc["heartbeat_p99_ms"]
    assert doc["steps"] >= 1 and doc["transactions_per_heartbeat"] > 0
    assert doc["list_1000_ms_median"] > 0 and doc["controller_rss_mb"] > 0
    assert doc["controller_cpu_ms_per_heartbeat"] > 0
    # PostgreSQL's CPU may round to 0 in a 2 s run (ticks of 10 ms), but its processes must have been seen:
    # a lookup that finds none would report 0 for any load
    assert doc["postgres_processes_measured"] > 0 and doc["postgres_cpu_ms_per_heartbeat"] >= 0
    assert doc["api_workers"] == workers and ("api_worker_rss_mb_max" in doc) == (workers > 0)
