"""Issue 14, "Prove it": a workload-level fault run, CI-sized.

A fifth of provider calls fail (capacity, quota, throttling, 5xx, timeouts,
answers lost after the cloud acted; every kind forced at least once on
launches), with spot reclaims and failing jobs: every job completes, no
request id is ever built twice, nothing is left running, and the fleet
invariants hold after every step. ``bench/fault_run.py`` runs the long version.
"""

from __future__ import annotations

from pathlib import Path

from bench.fault_run import fault_run


def test_a_faulty_cloud_still_completes_the_workload(tmp_path: Path) -> None:
    result = fault_run(jobs=16, rate=0.2, seed=3, tmp=tmp_path, work=(60, 180, 300))
    assert result["completed"] == 16, result
    assert result["duplicate_launches"] == 0
    assert result["leaked_instances"] == [] and result["store_live_at_end"] == []
    assert result["violations"] == []
    injected = result["faults_injected"]
    assert isinstance(injected, dict)
    for kind in ("capacity", "quota", "throttle", "5xx", "timeout", "lost"):
        assert injected.get(f"launch:{kind}", 0) >= 1, injected
    assert float(result["fault_share"]) >= 0.15  # type: ignore[arg-type]
