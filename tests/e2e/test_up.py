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
