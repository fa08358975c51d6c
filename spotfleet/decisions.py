"""The decision log of ``spotfleet up``: one line per decision the controller
takes (launch, bind, drain, preempt, terminate) and per thing that happens to
the fleet because of one (a launch failing, an instance gone, the fleet down).

Design choice: decisions are already recorded once, as events, in the step
that takes them; this module listens to the store's commits
(``Store.event_listeners``) and logs the ones that are decisions, so the log
and ``spotfleet events`` can never disagree and no policy or executor grows a
logging call of its own. ``--log-format json`` makes every log line one JSON
object (``JsonFormatter``) with the decision, job and instance as fields.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from spotfleet.model.changes import EventRecord

log = logging.getLogger("spotfleet.decisions")

# event kind -> the decision it records
DECISIONS: dict[str, str] = {
    "instance.requested": "launch",
    "instance.provisioning": "launched",
    "instance.launch_failed": "launch_failed",
    "job.bound": "bind",
    "instance.draining": "drain",
    "instance.terminating": "terminate",
    "instance.terminated": "terminated",
    "instance.interrupt_injected": "notice",
    "job.succeeded": "job_done",
    "job.failed": "job_failed",
    "job.cancelled": "job_cancelled",
    "fleet.down": "down",
    "fleet.resumed": "resume",
}


def decision_of(event: EventRecord) -> str | None:
    if event.kind == "job.draining":  # a job drains with its instance, or alone when preempted
        return "preempt" if "preempted" in event.message else None
    if event.kind == "job.pending" and "checkpointed" in event.message:
        return "requeue"
    return DECISIONS.get(event.kind)


def log_decisions(events: Sequence[EventRecord]) -> None:
    for event in events:
        decision = decision_of(event)
        if decision is None:
            continue
        level = logging.WARNING if event.level in ("warning", "error") else logging.INFO
        log.log(level, "%s: %s", decision, event.message,
                extra={"decision": decision, "job_id": event.job_id, "instance_id": event.instance_id,
                       "event_kind": event.kind})  # fmt: skip


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the decision
    fields when the record has them."""

    FIELDS = ("decision", "job_id", "instance_id", "event_kind")

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in self.FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def configure_logging(fmt: str) -> None:
    """``text`` (default) or ``json`` for every log line of the process (UTC)."""
    import time

    handler = logging.StreamHandler()
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter()
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("apscheduler", "alembic", "httpx"):  # routine ticks and migrations are not news
        logging.getLogger(noisy).setLevel(logging.WARNING)
