"""A moto server as a subprocess on a free loopback port, for every test that
talks to "AWS" over HTTP (the provider tests, the contract suite, terraform apply)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def moto_server(command: Sequence[str] = ("-m", "moto.server"), *, log: Path | None = None) -> Iterator[str]:
    """Run ``python <command> -H 127.0.0.1 -p PORT`` until the block ends; yields its URL.
    ``log`` keeps its output (and is quoted if it does not start)."""
    port = free_port()
    out = open(log, "wb") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, *command, "-H", "127.0.0.1", "-p", str(port)],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:  # waiting for a subprocess to bind, not for a policy
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    said = log.read_text()[-2000:] if log is not None and log.exists() else ""
                    raise RuntimeError(f"moto server did not start {said}".strip()) from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log is not None:
            out.close()  # type: ignore[union-attr]
