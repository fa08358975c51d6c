"""``bench/ha_chaos.py`` as the README runs it, CI-sized: three ``spotfleet up``
replicas on PostgreSQL (``test_ha.py``'s shape), the leader killed twice, then the invariants. The
kill-9 behaviour itself is ``test_ha.py``'s business; this checks that the
bench's command runs, kills, waits for the jobs and reports every figure, so
the command in the README cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PG_ADMIN

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(420)
def test_ha_chaos_kills_the_leader_and_reports_zero_losses() -> None:
    if PG_ADMIN == "off":
        pytest.skip("PostgreSQL disabled by SPOTFLEET_TEST_PG=off")
    # the bench waits up to 300 s for its jobs, then reports: the timeout leaves room for that report
    args = ["--kills", "2", "--replicas", "3", "--lease-ttl", "5", "--renew-every", "1", "--jobs-per-kill", "1",
            "--pg", PG_ADMIN]  # fmt: skip
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "ha_chaos.py"), *args],
        capture_output=True, text=True, timeout=400, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    assert doc["kills"] == 2 and doc["replicas"] == 3 and doc["jobs"] == 2
    assert 0 < doc["failover_p50_s"] <= doc["failover_max_s"] <= 15
    for key in ("duplicate_launches", "double_binds", "lost_jobs", "leaked_instances", "orphaned_workers"):
        assert doc[key] == 0, (key, doc)
    assert "leader kills, 3 replicas" in run.stdout
