"""Where job logs live on the controller, and reading and appending them.

Agents ship each attempt's stdout/stderr here in chunks (``AgentGateway.append_log``)
so logs survive the instance; users read them (``spotfleet logs``, the
dashboard). One file per job, attempt and node: ``logs/<job>/attempt-<n>[-node<r>].log``.
"""

from __future__ import annotations

import re
from pathlib import Path

from spotfleet.errors import NotFound
from spotfleet.files import private_dir, private_file

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def safe_id(value: str) -> bool:
    """An id that can name a file: no separators, no dots, no control characters."""
    return bool(_SAFE_ID.match(value))


class JobLogs:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, job_id: str, attempt: int, node_rank: int = 0) -> Path:
        if not safe_id(job_id):
            raise NotFound(f"no job {job_id!r}")
        suffix = f"-node{node_rank}" if node_rank else ""
        return self.root / job_id / f"attempt-{attempt}{suffix}.log"

    def append(self, job_id: str, attempt: int, node_rank: int, *, offset: int, data: str) -> int:
        """Append ``data`` if it starts at ``offset``; returns the size the agent
        should continue from (a repeated or out-of-order chunk changes nothing)."""
        path = self.path(job_id, attempt, node_rank)
        private_dir(self.root)
        private_dir(path.parent)
        private_file(path)  # 0600 before the first byte
        size = path.stat().st_size if path.exists() else 0
        if offset != size:
            return size
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(data)
        return size + len(data.encode("utf-8"))

    def read(self, job_id: str, attempts: list[int]) -> str:
        """Rank 0's log of these attempts, with a header per attempt when there are several."""
        parts = []
        for n in attempts:
            path = self.path(job_id, n)
            if path.exists():
                if len(attempts) > 1:
                    parts.append(f"===== attempt {n} =====\n")
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
        return "".join(parts)

    def read_bytes(self, job_id: str, *, attempt: int, offset: int = 0, node_rank: int = 0) -> bytes:
        """One attempt's log from byte ``offset`` on (``logs --follow`` polls this)."""
        path = self.path(job_id, attempt, node_rank)
        if not path.exists():
            return b""
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()
