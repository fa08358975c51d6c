#!/usr/bin/env python3
"""STAND-IN for ``nvidia-cuda-mps-control``, for machines without NVIDIA hardware (CI).

It is not MPS: it enforces nothing. It behaves like the control program
where the agent can see it — ``-d`` starts a background "daemon" (a process
that lives while ``<pipe dir>/control`` exists) and writes
``nvidia-cuda-mps-control.pid`` in the pipe directory, refusing a second
daemon on the same pipe directory; commands on stdin (``quit``…) are read
line by line and ``quit`` ends the daemon — and it RECORDS every invocation
as one JSON line in ``$CUDA_MPS_LOG_DIRECTORY/stand-in-commands.jsonl``:
argv, stdin commands and the MPS environment it saw. Tests read that file.

``STAND_IN_MPS_FAIL=1`` makes ``-d`` fail the way a broken driver would.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")


def record(entry: dict[str, object]) -> None:
    log_dir = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))
    log_dir.mkdir(parents=True, exist_ok=True)
    entry["env"] = {k: os.environ.get(k) for k in ENV_KEYS}
    with open(log_dir / "stand-in-commands.jsonl", "a") as fh:
        fh.write(json.dumps(entry) + "\n")


def alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def main(argv: list[str]) -> int:
    pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    pid_file, control = pipe / "nvidia-cuda-mps-control.pid", pipe / "control"
    if argv[:1] == ["-d"]:
        record({"argv": argv})
        if os.environ.get("STAND_IN_MPS_FAIL") == "1":
            print("stand-in: cannot start the MPS control daemon (STAND_IN_MPS_FAIL=1)", file=sys.stderr)
            return 1
        if pid_file.exists() and alive(pid_file):
            print("An instance of this daemon is already running", file=sys.stderr)
            return 1
        pipe.mkdir(parents=True, exist_ok=True)
        control.write_text("stand-in\n")
        child = os.fork()
        if child == 0:  # the "daemon": lives while its control pipe does (ten minutes at most)
            os.closerange(0, 3)
            end = time.monotonic() + 600
            while control.exists() and time.monotonic() < end:
                time.sleep(0.2)
            os._exit(0)
        pid_file.write_text(f"{child}\n")
        return 0
    commands = [line.strip() for line in sys.stdin if line.strip()]
    record({"argv": argv, "stdin": commands})
    for command in commands:
        if command == "quit":
            control.unlink(missing_ok=True)
            pid_file.unlink(missing_ok=True)
        elif command == "get_server_list":
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
