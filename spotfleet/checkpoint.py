"""Make a training job preemption-safe: the job author's side of the protocol.

Standard library only and import-light (it imports nothing else from spotfleet),
so ``from spotfleet import checkpoint`` costs a job nothing; the file can also
be vendored into a job's image as it is.

The protocol (docs/checkpointing.md has the long form)::

    env  SPOTFLEET_JOB_ID, SPOTFLEET_CHECKPOINT_DIR (stable across attempts),
         SPOTFLEET_ATTEMPT, SPOTFLEET_RESUME (1: an earlier attempt left a
         checkpoint), SPOTFLEET_NOTICE_FILE, SPOTFLEET_PROGRESS_FILE,
         SPOTFLEET_CHECKPOINT_SIGNAL (default SIGUSR1)
    signal   the agent writes the notice file, then signals the job's process group
    exit 85  "checkpointed, resume me" (CHECKPOINTED_EXIT_CODE)

Typical use::

    from spotfleet import checkpoint

    checkpoint.install()
    state = checkpoint.latest()
    step = state.read_json()["step"] if state else 0
    while step < total:
        train_one_step()
        step += 1
        checkpoint.report_progress(step=step, samples_per_s=rate)
        if checkpoint.should_checkpoint():
            checkpoint.save_json({"step": step}, step=step)
            if checkpoint.should_exit():
                checkpoint.exit_checkpointed()
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

CHECKPOINTED_EXIT_CODE = 85
"""Exit status meaning "I saved a checkpoint; resume me from it" (not a failure).
The protocol's constant is ``spotfleet.wire.CHECKPOINTED_EXIT_CODE``; it is
repeated here so a job importing this helper does not import pydantic
(``tests/test_layers.py`` checks they agree)."""

ENV_JOB_ID = "SPOTFLEET_JOB_ID"
ENV_CHECKPOINT_DIR = "SPOTFLEET_CHECKPOINT_DIR"
ENV_ATTEMPT = "SPOTFLEET_ATTEMPT"
ENV_RESUME = "SPOTFLEET_RESUME"
ENV_NOTICE_FILE = "SPOTFLEET_NOTICE_FILE"
ENV_PROGRESS_FILE = "SPOTFLEET_PROGRESS_FILE"
ENV_CHECKPOINT_SIGNAL = "SPOTFLEET_CHECKPOINT_SIGNAL"

DEFAULT_SIGNAL = "SIGUSR1"
CHECKPOINT_PREFIX = "ckpt-"
PERIODIC_KIND = "checkpoint"  # notice kind of an on-schedule (periodic) checkpoint request
SOFT_KINDS = frozenset({"rebalance", PERIODIC_KIND})  # save and carry on


def job_environment(
    *,
    job_id: str,
    checkpoint_dir: str | os.PathLike[str],
    attempt: int,
    resume: bool,
    notice_file: str | os.PathLike[str],
    progress_file: str | os.PathLike[str],
    signal_name: str = DEFAULT_SIGNAL,
) -> dict[str, str]:
    """The ``SPOTFLEET_*`` variables the agent sets for a job (one place defines them)."""
    return {
        ENV_JOB_ID: job_id,
        ENV_CHECKPOINT_DIR: os.fspath(checkpoint_dir),
        ENV_ATTEMPT: str(attempt),
        ENV_RESUME: "1" if resume else "0",
        ENV_NOTICE_FILE: os.fspath(notice_file),
        ENV_PROGRESS_FILE: os.fspath(progress_file),
        ENV_CHECKPOINT_SIGNAL: signal_name,
    }


def _utc_iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never half.

    Temp file in the same directory, fsync (``durable``), rename over the target,
    fsync the directory so the rename itself survives a crash.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Notice:
    """What the agent wrote to ``SPOTFLEET_NOTICE_FILE``."""

    kind: str  # spot_interruption, rebalance, maintenance, drain (controller's order), checkpoint (periodic)
    deadline: datetime | None  # when the instance goes away (absolute UTC); None for a soft notice
    seconds_left: float | None  # at the time the agent wrote the notice
    exit: bool  # True: save, then exit with CHECKPOINTED_EXIT_CODE; False: save and carry on
    issued_at: datetime | None = None

    def seconds_remaining(self, now: datetime | None = None) -> float | None:
        if self.deadline is None:
            return None
        return (self.deadline - (now or datetime.now(UTC))).total_seconds()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Notice:
        """Parse a notice; without an ``exit`` field, a deadline means "exit after
        saving" unless the kind is a soft one (rebalance, periodic checkpoint)."""
        seconds = data.get("seconds_left")
        kind = str(data.get("kind", ""))
        deadline = _parse_time(data.get("deadline"))
        raw_exit = data.get("exit")
        exit_after = raw_exit if isinstance(raw_exit, bool) else deadline is not None and kind not in SOFT_KINDS
        return cls(
            kind=kind,
            deadline=deadline,
            seconds_left=float(seconds) if isinstance(seconds, int | float) else None,
            exit=exit_after,
            issued_at=_parse_time(data.get("issued_at")),
        )


@dataclass(frozen=True, slots=True)
class CheckpointFile:
    """One saved checkpoint: ``ckpt-000000001200.json`` holds step 1200."""

    path: Path
    step: int

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def read_json(self) -> Any:
        return json.loads(self.path.read_text())


def _step_of(path: Path) -> int | None:
    name = path.name
    if not name.startswith(CHECKPOINT_PREFIX):
        return None
    digits = name[len(CHECKPOINT_PREFIX) :].split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


class Checkpointer:
    """The helper, bound to one environment (``os.environ`` by default).

    Outside spotfleet (no ``SPOTFLEET_*`` variables) it still works: checkpoints
    go to ``./checkpoints`` and there is no notice or progress file.
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        keep: int = 2,
        progress_interval: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        env = os.environ if env is None else env
        self.job_id = env.get(ENV_JOB_ID, "")
        self.checkpoint_dir = Path(env.get(ENV_CHECKPOINT_DIR) or "checkpoints")
        self.attempt = int(env.get(ENV_ATTEMPT) or 0)
        self.resume = env.get(ENV_RESUME, "0") == "1"
        self.notice_file = Path(env[ENV_NOTICE_FILE]) if env.get(ENV_NOTICE_FILE) else None
        self.progress_file = Path(env[ENV_PROGRESS_FILE]) if env.get(ENV_PROGRESS_FILE) else None
        self.signal_name = (env.get(ENV_CHECKPOINT_SIGNAL) or DEFAULT_SIGNAL).upper()
        self.keep = max(1, keep)
        self.progress_interval = progress_interval
        self.last_checkpoint: CheckpointFile | None = None
        self.signals_received = 0
        self._monotonic = monotonic
        self._requested = threading.Event()
        self._terminating = threading.Event()
        self._progress: dict[str, Any] = {}
        self._last_progress_write: float | None = None

    # -- signals -------------------------------------------------------------

    @property
    def signum(self) -> signal.Signals:
        name = self.signal_name if self.signal_name.startswith("SIG") else "SIG" + self.signal_name
        return signal.Signals[name]

    def install(self, *, on_signal: Callable[[int], None] | None = None, sigterm: bool = True) -> None:
        """Install the handler for the checkpoint signal (and SIGTERM, the last call).

        Call from the main thread. The handler only sets flags (and calls
        ``on_signal(signum)`` if given): do the saving in your loop, where the
        model is in a consistent state, when ``should_checkpoint()`` says so.
        """

        def handler(signum: int, _frame: object) -> None:
            self.signals_received += 1
            if signum == signal.SIGTERM:
                self._terminating.set()
            self._requested.set()
            if on_signal is not None:
                on_signal(signum)

        signal.signal(self.signum, handler)
        if sigterm and self.signum != signal.SIGTERM:
            signal.signal(signal.SIGTERM, handler)

    def request_checkpoint(self) -> None:
        """Ask for a checkpoint as the signal would (for your own triggers, and tests)."""
        self._requested.set()

    def should_checkpoint(self) -> bool:
        """Was a checkpoint asked for (signal, SIGTERM) since the last save?"""
        return self._requested.is_set()

    def should_exit(self) -> bool:
        """Must the job stop after saving? (The instance is going away.)

        True after SIGTERM, or after the checkpoint signal when the notice says
        ``exit``. A notice file without a signal to this process is stale (the
        agent writes the file, then signals) and is ignored.
        """
        if self._terminating.is_set():
            return True
        if self.signals_received == 0:
            return False
        notice = self.notice()
        return notice is not None and notice.exit

    def notice(self) -> Notice | None:
        """The agent's latest notice, or None (no file, or unreadable)."""
        if self.notice_file is None:
            return None
        try:
            data = json.loads(self.notice_file.read_text())
        except (OSError, ValueError):
            return None
        return Notice.from_json(data) if isinstance(data, dict) else None

    # -- saving and loading --------------------------------------------------

    def _final_path(self, step: int, suffix: str) -> Path:
        if step < 0:
            raise ValueError("step must be >= 0")
        return self.checkpoint_dir / f"{CHECKPOINT_PREFIX}{step:012d}{suffix}"

    def save_bytes(self, data: bytes, *, step: int, suffix: str = ".bin") -> Path:
        """Save a checkpoint atomically; returns its path."""
        path = self._final_path(step, suffix)
        write_atomic(path, data)
        self._saved(path, step)
        return path

    def save_json(self, obj: Any, *, step: int) -> Path:
        return self.save_bytes(json.dumps(obj).encode(), step=step, suffix=".json")

    @contextlib.contextmanager
    def writing(self, *, step: int, suffix: str = ".ckpt") -> Iterator[Path]:
        """Yield a temp path to write to (``torch.save(state, path)``); on success
        it is fsynced and renamed into place, on error removed."""
        path = self._final_path(step, suffix)
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint_dir / f".{path.name}.{os.getpid()}.tmp"
        try:
            yield tmp
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(self.checkpoint_dir)
        self._saved(path, step)

    def checkpoints(self) -> list[CheckpointFile]:
        """Every complete checkpoint, oldest first (temp files are never listed)."""
        if not self.checkpoint_dir.is_dir():
            return []
        found = []
        for path in self.checkpoint_dir.iterdir():
            step = _step_of(path)
            if step is not None and path.is_file():
                found.append(CheckpointFile(path, step))
        return sorted(found, key=lambda c: (c.step, c.path.stat().st_mtime_ns))

    def latest(self) -> CheckpointFile | None:
        """The checkpoint to resume from (highest step), or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    def _saved(self, path: Path, step: int) -> None:
        self.last_checkpoint = CheckpointFile(path, step)
        self._requested.clear()
        for old in self.checkpoints()[: -self.keep]:
            if old.path != path:
                with contextlib.suppress(FileNotFoundError):
                    old.path.unlink()
        self._progress["checkpoint"] = {"path": str(path), "step": step, "at": _utc_iso(datetime.now(UTC))}
        self._write_progress()

    # -- progress ------------------------------------------------------------

    def report_progress(
        self, *, step: int | None = None, samples_per_s: float | None = None, force: bool = False, **extra: Any
    ) -> None:
        """Tell the agent how far the job is (written at most every ``progress_interval`` s)."""
        if step is not None:
            self._progress["step"] = step
        if samples_per_s is not None:
            self._progress["samples_per_s"] = samples_per_s
        if extra:
            self._progress.setdefault("extra", {}).update(extra)
        now = self._monotonic()
        due = self._last_progress_write is None or now - self._last_progress_write >= self.progress_interval
        if force or due:
            self._write_progress()

    def _write_progress(self) -> None:
        self._last_progress_write = self._monotonic()
        if self.progress_file is None:
            return
        record = {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "pid": os.getpid(),
            "at": _utc_iso(datetime.now(UTC)),
            **self._progress,
        }
        write_atomic(self.progress_file, json.dumps(record).encode(), durable=False)

    def exit_checkpointed(self) -> NoReturn:
        """Exit with ``CHECKPOINTED_EXIT_CODE``: the agent resumes the job elsewhere."""
        self._write_progress()
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(CHECKPOINTED_EXIT_CODE)


_default: Checkpointer | None = None


def default() -> Checkpointer:
    """The process-wide helper the module functions use (created on first use)."""
    global _default
    if _default is None:
        _default = Checkpointer()
    return _default


def install(*, on_signal: Callable[[int], None] | None = None, sigterm: bool = True) -> None:
    default().install(on_signal=on_signal, sigterm=sigterm)


def should_checkpoint() -> bool:
    return default().should_checkpoint()


def should_exit() -> bool:
    return default().should_exit()


def notice() -> Notice | None:
    return default().notice()


def save_bytes(data: bytes, *, step: int, suffix: str = ".bin") -> Path:
    return default().save_bytes(data, step=step, suffix=suffix)


def save_json(obj: Any, *, step: int) -> Path:
    return default().save_json(obj, step=step)


def writing(*, step: int, suffix: str = ".ckpt") -> contextlib.AbstractContextManager[Path]:
    return default().writing(step=step, suffix=suffix)


def latest() -> CheckpointFile | None:
    return default().latest()


def report_progress(
    *, step: int | None = None, samples_per_s: float | None = None, force: bool = False, **extra: Any
) -> None:
    default().report_progress(step=step, samples_per_s=samples_per_s, force=force, **extra)


def exit_checkpointed() -> NoReturn:
    default().exit_checkpointed()
