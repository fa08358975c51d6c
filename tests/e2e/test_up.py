"""``spotfleet up`` as a user runs it: serves, stops cleanly on Ctrl-C, resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_local_e2e import free_port

pytestmark = pytest.mark.e2e


def start(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "SPOTFLEET_DATA_DIR": str(tmp_path)}
    return subprocess.Popen([sys.executable, "-m", "spotfleet.cli", "up", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def wait_healthy(url: str, proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "exited"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("controller did not come up")


def test_ctrl_c_stops_cleanly_and_a_restart_resumes(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(tmp_path, port)
    wait_healthy(url, proc)
    # a GPU the local provider does not offer: the job stays pending across the restart
    spec = {"name": "later", "command": "true", "resources": {"gpu_types": ["B300"]}}
    job = httpx.post(f"{url}/v1/jobs", json=spec).json()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "stopped cleanly" in out

    proc = start(tmp_path, port)
    try:
        wait_healthy(url, proc)
        again = httpx.get(f"{url}/v1/jobs/{job['id']}").json()
        assert again["name"] == "later" and again["state"] == "pending"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_json_decision_log_sigterm_and_a_taken_port(tmp_path: Path) -> None:
    """Each decision is one JSON line; a second `up` on the same port is one
    clean error (exit 5); SIGTERM stops like Ctrl-C."""
    import json

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = tmp_path / "c.yaml"
    config.write_text(
        "reconcile: {interval: 0.3s, idle_ttl: 1s, heartbeat: 0.3s}\nproviders: {local: {heartbeat: 0.3s}}\n"
    )
    env = {**os.environ, "SPOTFLEET_DATA_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "spotfleet.cli", "up", "--port", str(port), "--config", str(config),
                             "--log-format", "json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    try:
        wait_healthy(url, proc)
        elsewhere = {**env, "SPOTFLEET_DATA_DIR": str(tmp_path / "other")}  # its own store: only the port clashes
        taken = subprocess.run([sys.executable, "-m", "spotfleet.cli", "up", "--port", str(port)], env=elsewhere,
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert taken.returncode == 5, taken.stderr
        assert "Traceback" not in taken.stderr
        assert [line for line in taken.stderr.splitlines() if line.startswith("error:")] == [
            f"error: 127.0.0.1:{port} is already in use (another `spotfleet up`?): stop it, or choose another port "
            "with --port or api.port"
        ]
        spec = {"name": "quick", "command": ["python", "-c", "print('hi')"], "resources": {"gpus": 1}}
        job = httpx.post(f"{url}/v1/jobs", json=spec).json()
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/v1/jobs/{job['id']}").json()["state"] != "succeeded":
            assert time.monotonic() < deadline, "the job did not finish"
            time.sleep(0.2)
        while httpx.get(f"{url}/v1/instances").json():  # idle TTL 1 s: given back
            assert time.monotonic() < deadline, "the instance was not given back"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == len(out.strip().splitlines()), "every line is JSON"
    decisions = [
        (line["decision"], line.get("job_id"), line.get("instance_id")) for line in lines if "decision" in line
    ]
    kinds = [d for d, _, _ in decisions]
    for wanted in ("launch", "bind", "job_done", "terminate"):
        assert wanted in kinds, kinds
    assert kinds.index("launch") < kinds.index("bind") < kinds.index("job_done") < kinds.index("terminate")
    assert ("bind", job["id"], None) in decisions
    assert lines[-1]["message"] == "stopped cleanly"


def test_a_second_controller_on_one_sqlite_database_exits_2_naming_the_holder(tmp_path: Path) -> None:
    """SQLite is single-controller: another `up` on the same data dir (another
    port), or on the same database file from another data dir, is refused."""
    port = free_port()
    proc = start(tmp_path, port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        health = httpx.get(f"http://127.0.0.1:{port}/healthz").json()
        assert health["role"] == "leader" and health["epoch"] >= 1
        env = {**os.environ, "SPOTFLEET_DATA_DIR": str(tmp_path)}
        again = subprocess.run([sys.executable, "-m", "spotfleet.cli", "up", "--port", str(free_port())], env=env,
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert again.returncode == 2, again.stderr
        (line,) = [ln for ln in again.stderr.splitlines() if ln.startswith("error:")]
        assert f"pid {proc.pid} on " in line and "another controller already runs on the SQLite database" in line
        assert "Traceback" not in again.stderr
        same_db = subprocess.run([sys.executable, "-m", "spotfleet.cli", "up", "--port", str(free_port()),
                                  "--data-dir", str(tmp_path / "other"), "--db",
                                  f"sqlite:///{tmp_path / 'spotfleet.db'}"],
                                 env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert same_db.returncode == 2 and f"pid {proc.pid} on " in same_db.stderr, same_db.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "this replica leads (epoch" in out
