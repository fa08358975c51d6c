"""Files private to the controller's user: directories 0700, files 0600.

The data dir holds the database (every spec and its env), job logs, local
instances' agent configs (their tokens) and checkpoints: nothing in it is for
other users of the machine. ``os.umask`` is process-wide and would also reach
jobs' files, so modes are set explicitly where each thing is created.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it 0700; returns it."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` if missing and make it 0600, before anything is written to it."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, FILE_MODE)
    os.close(fd)
    os.chmod(path, FILE_MODE)
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to a 0600 file (created 0600: never readable by others, not even briefly)."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(path, FILE_MODE)


def private_database(store: Any) -> None:
    """A SQLite database file (and its WAL/SHM companions) 0600."""
    if getattr(store, "dialect", "") != "sqlite":
        return
    database = store.engine.url.database
    if not database or database == ":memory:":
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        candidate = Path(database + suffix)
        if candidate.exists():
            os.chmod(candidate, FILE_MODE)
