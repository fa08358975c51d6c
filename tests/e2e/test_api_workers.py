"""``spotfleet up --api-workers N``: the API in N processes in front of one step
process, on PostgreSQL, as an operator runs it (real processes, two replicas).

- the workers, not the step process, answer; every answer names the replica's
  role, and a follower's workers name the leader;
- a submission through a follower's worker runs (its wake reaches the leader);
- ``/metrics`` from a worker shows the step process's step histogram;
- a worker killed is restarted; the step process killed (-9) takes its workers
  with it (no orphans) and the other replica takes over;
- SQLite refuses API workers with exit 2 and one line naming the setting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import _reset_pg
from tests.e2e.ha_cluster import Cluster, alive, api_workers_of, chaos_job
from tests.e2e.test_ha import wait
from tests.e2e.test_local_e2e import free_port

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    _reset_pg(pg_url)
    c = Cluster(database=pg_url, data_dir=tmp_path, replicas=2, lease_ttl=5.0, renew_every=1.0, api_workers=2)
    c.start_all()
    yield c
    c.stop()


@pytest.mark.postgres
@pytest.mark.timeout(240)
def test_workers_serve_both_replicas_restart_and_die_with_their_step_process(cluster: Cluster) -> None:
    port, health = cluster.wait_leader()
    follower = next(p for p in cluster.ports if p != port)
    lead_proc, follow_proc = cluster.procs[port], cluster.procs[follower]
    wait("two workers per replica", lambda: len(api_workers_of(lead_proc.pid)) == 2
         and len(api_workers_of(follow_proc.pid)) == 2, timeout=30)  # fmt: skip
    lead_workers = set(api_workers_of(lead_proc.pid))

    answers = [httpx.get(f"{cluster.url(port)}/healthz", timeout=5).json() for _ in range(20)]
    assert {a["process"] for a in answers} <= lead_workers, "the workers answer, not the step process"
    assert all(a["role"] == "leader" and a["replica"] == health["replica"] for a in answers)
    # the follower learns who leads on its next lease check (every renew_every), not at once
    wait("the follower to name the leader", lambda: httpx.get(f"{cluster.url(follower)}/readyz", timeout=5)
         .json().get("leader") == health["replica"], timeout=15)  # fmt: skip
    followed = [httpx.get(f"{cluster.url(follower)}/readyz", timeout=5).json() for _ in range(10)]
    assert all(f["ready"] and f["role"] == "follower" and f["leader"] == health["replica"] for f in followed)

    first = cluster.submit(chaos_job("via-follower-worker", 5), port=follower)
    wait("the follower worker's submission to run", lambda: any(
        j["id"] == first and j["state"] == "succeeded" for j in cluster.jobs()), timeout=60)  # fmt: skip
    metrics = httpx.get(f"{cluster.url(port)}/metrics", timeout=10).text
    count = next(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("spotfleet_reconcile_step_seconds_count"))  # fmt: skip
    assert count >= 1, "a worker shows the step process's step timings"

    victim = sorted(lead_workers)[0]
    os.kill(victim, signal.SIGKILL)
    wait("the killed worker to be replaced", lambda: len(api_workers_of(lead_proc.pid)) == 2
         and victim not in api_workers_of(lead_proc.pid), timeout=30)  # fmt: skip
    assert httpx.get(f"{cluster.url(port)}/healthz", timeout=5).json()["role"] == "leader"

    orphans = set(api_workers_of(lead_proc.pid))
    kill = cluster.kill_leader(restart=False)
    assert kill.pid == lead_proc.pid and len(orphans) == 2 and kill.orphans == 0
    assert all(not alive(pid) for pid in orphans), "the dead step process's workers exited"
    new_port, new = cluster.wait_leader(above_epoch=kill.epoch)
    assert new_port == follower and new["replica"] != health["replica"]
    second = cluster.submit(chaos_job("after-failover", 5), port=follower)
    wait("work after the failover to run", lambda: any(
        j["id"] == second and j["state"] == "succeeded" for j in cluster.jobs()), timeout=60)  # fmt: skip
    wait("scale to zero", lambda: cluster.invariants()["leaked_instances"] == 0, timeout=60)
    found = cluster.invariants()
    for key in ("duplicate_launches", "unknown_instances", "double_binds", "lost_jobs", "repeated_attempts"):
        assert found[key] == 0, (key, found)


def test_sqlite_refuses_api_workers_with_exit_2_naming_the_setting(tmp_path: Path) -> None:
    env = {**os.environ, "SPOTFLEET_DATA_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "spotfleet.cli", "up", "--port", str(free_port()), "--api-workers",
                          "2"], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2, run.stderr
    (line,) = [ln for ln in run.stderr.splitlines() if ln.startswith("error:")]
    assert "api.workers" in line and "PostgreSQL" in line and "sqlite" in line, line
    assert "Traceback" not in run.stderr


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_ctrl_c_to_the_process_group_stops_step_and_workers_cleanly(pg_url: str, tmp_path: Path) -> None:
    """A terminal's Ctrl-C (or systemd's stop) reaches the workers too: nothing is
    respawned, everything exits, the step process says it stopped cleanly."""
    _reset_pg(pg_url)
    port = free_port()
    env = {**os.environ, "SPOTFLEET_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "spotfleet.cli", "up", "--port", str(port), "--db", pg_url,
                             "--api-workers", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        wait("the API", lambda: _healthy(port), timeout=60)
        workers = set(api_workers_of(proc.pid))
        assert len(workers) == 2
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # fail, but leave no controller or worker behind
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate(timeout=10)
            out += "\n[killed: did not stop within 60 s of the interrupt]"
    assert proc.returncode == 0, out
    assert "stopped cleanly" in out and "restarting" not in out, out
    wait("the workers to exit", lambda: all(not alive(pid) for pid in workers), timeout=10)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
