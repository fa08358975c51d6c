"""One local "instance": a process that plays a VM on this machine.

Started by the local provider as ``python -m spotfleet.providers.local_host DIR``
in a new session. Like a cloud VM it has:

- a metadata service: an emulated AWS IMDSv2 or GCE metadata server on
  loopback (``spotfleet.metadata``), which the agent's notice watcher polls;
- the node agent, restarted if it dies, as systemd would;
- a reclaim: when a spot notice's deadline passes, every process of its session
  — agent and jobs alike — is killed, as the cloud taking the machine would.
- a termination: SIGTERM from the provider, or the provider's ``terminated``
  marker, which the host also watches. The provider finds the host's pid only
  in ``host.json``, written once the host is up, so an instance terminated in
  its first moments is ended through the marker, not left running.

DIR holds ``instance.json`` (written by the provider), ``agent.yaml`` and
``host.json`` (pid, session, metadata URL).
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
import yaml

from spotfleet.files import write_private
from spotfleet.metadata import server_for


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
    metadata = server_for(spec["metadata"], instance_id=spec["provider_id"], zone=spec["zone"]).start()
    agent_cfg = yaml.safe_load((root / "agent.yaml").read_text())
    agent_cfg.update({"metadata": spec["metadata"], "metadata_url": metadata.url})
    write_private(root / "agent.yaml", yaml.safe_dump(agent_cfg))
    (root / "host.json").write_text(
        json.dumps({"pid": os.getpid(), "sid": sid, "started_at": _now(), "metadata_url": metadata.url})
    )
    stopping = False

    def _stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    agent: subprocess.Popen[bytes] | None = None
    with open(root / "agent.log", "ab") as log:
        while not stopping:
            if (root / "terminated").exists():
                break  # the provider terminated us, possibly before host.json told it whom to signal
            reclaim_at = metadata.deadlines.get("spot")
            if reclaim_at is not None and datetime.now(UTC) >= reclaim_at:
                (root / "reclaimed").write_text(_now())
                break
            if agent is None or agent.poll() is not None:
                if agent is not None:
                    time.sleep(1.0)  # Restart=always, RestartSec=1
                agent = subprocess.Popen(
                    [sys.executable, "-m", "spotfleet.agent", "--config", str(root / "agent.yaml")],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(root),
                )  # fmt: skip
            time.sleep(0.05)
    if not (root / "reclaimed").exists():
        (root / "terminated").write_text(_now())
    kill_session(sid)
    metadata.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
