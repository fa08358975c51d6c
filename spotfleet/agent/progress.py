"""Read what a job reported through ``spotfleet.checkpoint.report_progress``.

The job writes ``SPOTFLEET_PROGRESS_FILE`` atomically; the agent reads it on
each heartbeat and ships step, throughput and the latest checkpoint (the resume
pointer the controller stores as ``Job.checkpoint``). A missing, partial or
foreign file reads as "nothing reported" rather than an error: a job's bad
output must never stop the agent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from spotfleet.model.job import Checkpoint


@dataclass(frozen=True, slots=True)
class JobProgress:
    step: int | None
    samples_per_s: float | None
    at: datetime | None
    attempt: int
    checkpoint: Checkpoint | None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """What goes into the heartbeat (the shape of ``Job.progress``)."""
        data: dict[str, Any] = {"step": self.step, "samples_per_s": self.samples_per_s, "attempt": self.attempt}
        if self.at is not None:
            data["at"] = self.at.isoformat()
        if self.checkpoint is not None:
            data["checkpoint"] = self.checkpoint.to_dict()
        if self.extra:
            data["extra"] = self.extra
        return data


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def read_progress(path: Path) -> JobProgress | None:
    """The job's latest report, or None if there is none (or it is unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else 0
    checkpoint = None
    raw = data.get("checkpoint")
    if isinstance(raw, dict) and isinstance(raw.get("path"), str):
        at = _time(raw.get("at")) or _time(data.get("at"))
        step = raw.get("step")
        if at is not None:
            checkpoint = Checkpoint(raw["path"], step if isinstance(step, int) else None, at, int(attempt or 0))
    step = data.get("step")
    rate = data.get("samples_per_s")
    extra = data.get("extra")
    return JobProgress(
        step=step if isinstance(step, int) else None,
        samples_per_s=float(rate) if isinstance(rate, int | float) else None,
        at=_time(data.get("at")),
        attempt=int(attempt or 0),
        checkpoint=checkpoint,
        extra=extra if isinstance(extra, dict) else {},
    )
