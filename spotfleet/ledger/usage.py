"""What each job attempt did with its GPUs, recorded from agent heartbeats.

The heartbeat path (``AgentGateway.heartbeat``) asks ``UsageRecorder.fold``
for the folds of each beat and the store applies them in the heartbeat's one
transaction. One ``attempt_usage`` row per node of each attempt:

- progress: the first step reported beyond the checkpoint the attempt resumed
  from (``first_progress_at``: the end of its startup/restart overhead), the
  last step reached, and the newest checkpoint step — from which the ledger
  computes the work an interruption rolled back (``redone_fraction``);
- GPU use from the agent's NVML telemetry: samples, mean utilisation, samples
  under the idle threshold, peak memory (the forecasts read these for
  right-sizing through ``job_gpu_usage``);
- the GPU partition as the agent applied it: isolation (MIG device, MPS
  share, time-sliced = "shared, not isolated", whole GPUs), the share of a GPU
  given, the share of SM time used (interference) and the memory limit.

Design choice: this is an inbox table like ``node_reports``, written only here,
never by the reconcile step, so the single-writer rule for lifecycle columns
holds. ``IdleWatch`` raises an ``instance.gpus_idle`` event when an instance's
GPUs all stay under 5 % for 10 minutes while jobs are bound to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from functools import partial
from typing import Any

from spotfleet.ledger.types import AttemptUsage, UsageCounters
from spotfleet.model.changes import EventRecord, UsageUpdate
from spotfleet.store.store import Store
from spotfleet.wire import INT32_MAX, INT32_MIN, Heartbeat, JobStatus

IDLE_UTILIZATION_PCT = 5.0
IDLE_ALERT_AFTER = timedelta(minutes=10)
# outcomes after which the next attempt resumes from a checkpoint (the work since is redone)
ROLLBACK_OUTCOMES = frozenset({"interrupted", "lost", "checkpointed"})


def _int(value: Any) -> int | None:
    """An integer the store can keep (32-bit), or None: a progress step is free
    JSON from the job, and one past INTEGER's range must not fail the heartbeat."""
    ok = isinstance(value, int) and not isinstance(value, bool) and INT32_MIN <= value <= INT32_MAX
    return value if ok else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def telemetry_jobs(telemetry: Mapping[str, Any]) -> dict[tuple[str, int, int], Mapping[str, Any]]:
    """The agent's per-job GPU figures, by (job id, attempt, node rank)."""
    out: dict[tuple[str, int, int], Mapping[str, Any]] = {}
    for item in telemetry.get("jobs", []) or []:
        if isinstance(item, Mapping) and isinstance(item.get("job_id"), str):
            key = (item["job_id"], _int(item.get("attempt")) or 0, _int(item.get("node_rank")) or 0)
            out[key] = item
    return out


def instance_utilization(telemetry: Mapping[str, Any]) -> float | None:
    """Mean utilisation over an instance's GPUs (None without NVML data)."""
    utils = [_num(g.get("utilization_pct")) for g in telemetry.get("gpus", []) or [] if isinstance(g, Mapping)]
    vals = [u for u in utils if u is not None]
    return sum(vals) / len(vals) if vals else None


@dataclass(slots=True)
class IdleWatch:
    """Per instance: since when all its GPUs have been under the threshold."""

    threshold_pct: float = IDLE_UTILIZATION_PCT
    after: timedelta = IDLE_ALERT_AFTER
    low_since: dict[str, datetime] = field(default_factory=dict)
    alerted: set[str] = field(default_factory=set)

    def update(self, instance_id: str, telemetry: Mapping[str, Any], *, jobs_bound: bool, now: datetime) -> bool:
        """True exactly once per idle stretch, when it has lasted ``after``."""
        gpus = [g for g in telemetry.get("gpus", []) or [] if isinstance(g, Mapping)]
        utils = [_num(g.get("utilization_pct")) for g in gpus]
        idle = bool(gpus) and jobs_bound and all(u is not None and u < self.threshold_pct for u in utils)
        if not idle:
            self.low_since.pop(instance_id, None)
            self.alerted.discard(instance_id)
            return False
        since = self.low_since.setdefault(instance_id, now)
        if now - since >= self.after and instance_id not in self.alerted:
            self.alerted.add(instance_id)
            return True
        return False


class UsageRecorder:
    """Turns heartbeats into usage folds and idle alerts; writes nothing itself
    (the gateway hands both to ``Store.agent_exchange``, one transaction)."""

    def __init__(self, *, idle: IdleWatch | None = None) -> None:
        self.idle = idle or IdleWatch()

    def fold(self, instance_id: str, beat: Heartbeat, jobs: Iterable[JobStatus], *, now: datetime,
             jobs_bound: bool) -> tuple[list[UsageUpdate], list[EventRecord]]:  # fmt: skip
        """The usage folds for ``jobs`` (the beat's statuses this instance may speak
        for) and, once per idle stretch, an ``instance.gpus_idle`` event."""
        per_job = telemetry_jobs(beat.telemetry)
        threshold = self.idle.threshold_pct
        updates: list[UsageUpdate] = [
            ((j.job_id, j.attempt, j.node_rank),
             partial(fold_usage, j=j, gpu=per_job.get((j.job_id, j.attempt, j.node_rank)), now=now, threshold=threshold))
            for j in jobs
        ]  # fmt: skip
        events: list[EventRecord] = []
        if beat.telemetry.get("gpus") and self.idle.update(instance_id, beat.telemetry, jobs_bound=jobs_bound, now=now):
            util = instance_utilization(beat.telemetry)
            events.append(EventRecord(
                at=now, kind="instance.gpus_idle", level="warning", instance_id=instance_id,
                message=f"{instance_id}: GPUs under {threshold:g}% for "
                        f"{self.idle.after.total_seconds() / 60:g} min while jobs are bound (now {util or 0:.1f}%)",
                data={"jobs": sorted({j.job_id for j in beat.jobs}), "utilization_pct": util},
            ))  # fmt: skip
        return updates, events


def fold_usage(row: UsageCounters, j: JobStatus, gpu: Mapping[str, Any] | None, *, now: datetime,
                threshold: float) -> None:  # fmt: skip
    row.updated_at = now
    step = _int(j.progress.get("step"))
    if step is not None:
        if row.first_step is None:
            row.first_step = step
        if row.first_progress_at is None and step > (row.resume_step or 0):
            row.first_progress_at = now
        if row.last_step is None or step > row.last_step:
            row.last_step, row.last_progress_at = step, now
    ckpt = j.checkpoint
    if ckpt is not None and ckpt.step is not None and (row.checkpoint_step is None or ckpt.step >= row.checkpoint_step):
        row.checkpoint_step, row.checkpoint_at = ckpt.step, ckpt.at
    if gpu is not None:
        util = _num(gpu.get("utilization_pct"))
        if util is not None:
            row.gpu_samples = (row.gpu_samples or 0) + 1
            row.gpu_util_sum = (row.gpu_util_sum or 0.0) + util
            row.gpu_idle_samples = (row.gpu_idle_samples or 0) + (1 if util < threshold else 0)
        mem = _num(gpu.get("memory_used_mib"))
        if mem is not None:
            row.peak_gpu_memory_mib = max(row.peak_gpu_memory_mib or 0.0, mem)
        total = _num(gpu.get("memory_total_mib"))
        if total is not None:
            row.gpu_memory_total_mib = total
        given, used, limit = (
            _num(gpu.get("given_share")),
            _num(gpu.get("used_share")),
            _num(gpu.get("memory_limit_mib")),
        )
        if given is not None:
            row.given_share = given
        if used is not None:
            row.share_samples = (row.share_samples or 0) + 1
            row.used_share_sum = (row.used_share_sum or 0.0) + used
        if limit is not None:
            row.memory_limit_mib = limit
    if j.isolation is not None:
        row.isolation, row.isolation_note = j.isolation, j.isolation_note


# ------------------------------------------------------------ readers


def load_usage(store: Store, job_ids: Iterable[str] | None = None) -> dict[tuple[str, int, int], AttemptUsage]:
    return store.attempt_usage(job_ids)


def job_gpu_usage(store: Store, job_id: str) -> dict[str, float | None]:
    """Peak GPU memory and mean utilisation over all of a job's attempts (for right-sizing)."""
    usage = list(load_usage(store, [job_id]).values())
    samples = sum(u.gpu_samples for u in usage)
    util = sum((u.mean_utilization_pct or 0.0) * u.gpu_samples for u in usage)
    return {
        "peak_gpu_memory_mib": max((u.peak_gpu_memory_mib for u in usage), default=0.0),
        "mean_utilization_pct": util / samples if samples else None,
        "samples": float(samples),
    }


def redone_fraction(attempts: list[tuple[int, str | None, AttemptUsage | None]]) -> dict[int, Fraction]:
    """Per attempt number: the fraction of its productive time that was rolled back.

    ``attempts`` is one node's (attempt, outcome, usage) in attempt order. The
    attempt started from step ``base`` (the checkpoint it resumed from) and
    reached ``last``; the next attempt resumed from ``next_base`` (the newest
    checkpoint so far). If the attempt ended in a rollback outcome, the steps
    ``next_base..last`` were done again: a fraction (last − next_base) ÷
    (last − base) of its productive time. Unknown progress counts as nothing redone.
    """
    out: dict[int, Fraction] = {}
    base = 0
    for n, (number, outcome, usage) in enumerate(attempts):
        if usage is not None and usage.resume_step is not None:
            base = max(base, usage.resume_step)
        ckpt = usage.checkpoint_step if usage is not None and usage.checkpoint_step is not None else None
        next_base = max(base, ckpt) if ckpt is not None else base
        last = usage.last_step if usage is not None else None
        has_next = n + 1 < len(attempts)
        if outcome in ROLLBACK_OUTCOMES and has_next and last is not None and last > base:
            out[number] = Fraction(max(0, last - next_base), last - base)
        base = next_base
    return out
