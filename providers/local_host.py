"""One local "instance": a process that plays a VM on this machine.

Started by the local provider as ``python -m spotfleet.providers.local_host DIR``
in a new session. It runs the node agent (restarting it like systemd would) and,
when the instance is terminated or reclaimed, kills every process of its session
— agent and jobs alike — as a cloud taking the machine away would. DIR holds
``instance.json`` (written by the provider), ``agent.yaml`` and ``host.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import psutil


def session_processes(sid: int) -> list[psutil.Process]:
    """Every process of session ``sid`` except the caller."""
    me = os.getpid()
    out = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != me and os.getsid(proc.pid) == sid:
                out.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def kill_session(sid: int) -> None:
    for proc in session_processes(sid):
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _now() -> str:
    return datetime.now(UTC).isoformat()


def main(directory: str) -> int:
    root = Path(directory)
    spec = json.loads((root / "instance.json").read_text())
    sid = os.getsid(0)
    (root / "host.json").write_text(json.dumps({"pid": os.getpid(), "sid": sid, "started_at": _now()}))
    stopping = False

    def _stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    agent: subprocess.Popen[bytes] | None = None
    log = open(root / "agent.log", "ab")
    while not stopping:
        reclaim = root / "reclaim-at"
        if reclaim.exists():
            try:
                at = datetime.fromisoformat(reclaim.read_text().strip())
            except ValueError:
                at = datetime.now(UTC)
            if datetime.now(UTC) >= at:
                (root / "reclaimed").write_text(_now())
                break
        if agent is None or agent.poll() is not None:
            if agent is not None:
                time.sleep(1.0)  # Restart=always, RestartSec=1
            agent = subprocess.Popen(
                [sys.executable, "-m", "spotfleet.agent", "--config", str(root / "agent.yaml")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(root),
            )  # fmt: skip
        time.sleep(0.1)
    if not (root / "reclaimed").exists():
        (root / "terminated").write_text(_now())
    kill_session(sid)
    del spec
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
