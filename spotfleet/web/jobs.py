"""The Jobs pages: a filterable list, and one job's story on a timeline.

A job's timeline is built from what the store already records — nothing is
logged twice for the dashboard:

- each attempt (``job_attempts``): the instance it held, from bind to release,
  with the moment its process started (before it: provisioning / restart);
- the instance's offering: provider, market, zone, type, price;
- interruptions: the instance's move to ``draining`` on a notice (its history
  and ``notice_kind``), and the job's own ``running → draining`` move;
- checkpoints: the attempt's outcome ``checkpointed`` and the step saved
  (``attempt_usage``), and the job's latest checkpoint;
- resumes: a later attempt that started from a checkpoint step.

The same facts fill an HTML table (readable without the chart, and by a screen
reader) and the Chart.js timeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from spotfleet.api.principal import Principal
from spotfleet.errors import NotFound
from spotfleet.ledger.load import LedgerData
from spotfleet.ledger.report import AttemptCost, job_breakdown
from spotfleet.ledger.usage import load_usage
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Job, JobState, is_failure_outcome
from spotfleet.model.spec import Priority
from spotfleet.store.store import Store
from spotfleet.web.fmt import epoch_ms

PAGE_SIZE = 500


@dataclass(frozen=True, slots=True)
class JobFilters:
    state: str = ""
    tenant: str = ""
    priority: str = ""
    q: str = ""

    def query(self) -> dict[str, str]:
        return {k: v for k, v in (("state", self.state), ("tenant", self.tenant), ("priority", self.priority),
                                  ("q", self.q)) if v}  # fmt: skip


STATES = [s.value for s in JobState]
PRIORITIES = [p.value for p in Priority]


def list_jobs(store: Store, principal: Principal, filters: JobFilters) -> list[Job]:
    """Newest first; a tenant principal's own tenant whatever the filter says."""
    tenant = principal.tenant if not principal.all_tenants else (filters.tenant or None)
    if not principal.all_tenants and filters.tenant and filters.tenant != principal.tenant:
        return []
    states = [JobState(filters.state)] if filters.state in STATES else None
    jobs = store.list_jobs(states=states, tenant=tenant)
    if filters.priority:
        jobs = [j for j in jobs if j.spec.priority.value == filters.priority]
    if filters.q:
        q = filters.q.lower()
        jobs = [j for j in jobs if q in j.id.lower() or q in j.spec.name.lower()]
    return jobs[::-1][:PAGE_SIZE]


def tenants(store: Store, principal: Principal) -> list[str]:
    if not principal.all_tenants:
        return [principal.tenant or ""]
    return sorted({j.spec.tenant for j in store.list_jobs()})


def visible_job(store: Store, principal: Principal, job_id: str) -> Job:
    """The job, or ``NotFound`` — also for another tenant's job (no hint it exists)."""
    job = store.get_job(job_id)
    if not principal.sees(job.spec.tenant):
        raise NotFound(f"no job with id {job_id!r}")
    return job


def progress(job: Job) -> dict[str, Any]:
    """Step reached, of how many if the job says (``total``/``steps``), as a fraction."""
    p = job.progress or {}
    step = p.get("step")
    total = p.get("total") or p.get("total_steps") or p.get("steps")
    fraction = None
    if job.state is JobState.SUCCEEDED:
        fraction = 1.0
    elif isinstance(step, int | float) and isinstance(total, int | float) and total > 0:
        fraction = min(max(step / total, 0.0), 1.0)
    return {"step": step, "total": total, "fraction": fraction, "at": p.get("at"),
            "rate": p.get("samples_per_s")}  # fmt: skip


@dataclass(slots=True)
class Marker:
    at: datetime
    kind: str  # notice | checkpoint | resume | failed
    text: str


@dataclass(slots=True)
class AttemptLine:
    attempt: int
    node_rank: int
    instance: Instance | None
    instance_id: str
    bound_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str | None
    resume_step: int | None
    last_step: int | None
    checkpoint_step: int | None
    cost: AttemptCost | None
    markers: list[Marker] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"#{self.attempt}" + (f".{self.node_rank}" if self.node_rank else "")

    @property
    def where(self) -> str:
        i = self.instance
        if i is None:
            return self.instance_id
        o = i.offering
        return f"{o.provider} {o.instance_type} {o.market.value} {o.zone}"


def _notice_at(inst: Instance) -> datetime | None:
    for h in inst.history:
        if h.to_state == InstanceState.DRAINING.value and "notice" in h.reason:
            return h.at
    return None


def attempts(store: Store, job: Job, *, ledger: LedgerData) -> list[AttemptLine]:
    rows = store.job_attempts(job.id)
    usage = load_usage(store, [job.id])
    spent = {(a.attempt, a.node_rank): a for a in job_breakdown(ledger.ledger.lines, job.id, usage=usage)}
    out: list[AttemptLine] = []
    instances: dict[str, Instance | None] = {}
    for r in rows:
        iid = r["instance_id"]
        if iid not in instances:
            try:
                instances[iid] = store.get_instance(iid)
            except NotFound:
                instances[iid] = None
        u = usage.get((job.id, r["attempt"], r["node_rank"]))
        line = AttemptLine(
            attempt=r["attempt"], node_rank=r["node_rank"], instance=instances[iid], instance_id=iid,
            bound_at=r["bound_at"], started_at=r["started_at"], ended_at=r["ended_at"], outcome=r["outcome"],
            resume_step=u.resume_step if u else None, last_step=u.last_step if u else None,
            checkpoint_step=u.checkpoint_step if u else None, cost=spent.get((r["attempt"], r["node_rank"])),
        )  # fmt: skip
        _mark(line, job)
        out.append(line)
    return out


def _mark(line: AttemptLine, job: Job) -> None:
    end = line.ended_at
    inst = line.instance
    if inst is not None and inst.notice_kind:
        at = _notice_at(inst)
        if at is not None and at >= line.bound_at and (end is None or at <= end):
            when = f", reclaim at {inst.notice_deadline:%H:%M:%S}" if inst.notice_deadline else ""
            line.markers.append(
                Marker(at, "notice", f"{inst.notice_kind.value.replace('_', ' ')} notice on {inst.id}{when}")
            )
    if not any(m.kind == "notice" for m in line.markers):  # no instance notice: a preemption drain
        for h in job.history:
            if h.to_state == JobState.DRAINING.value and h.at >= line.bound_at and (end is None or h.at <= end):
                line.markers.append(Marker(h.at, "notice", h.reason))
                break
    if line.outcome == "checkpointed" and end is not None:
        step = f" at step {line.checkpoint_step}" if line.checkpoint_step is not None else ""
        line.markers.append(Marker(end, "checkpoint", f"checkpointed{step}; requeued to resume"))
    if line.resume_step is not None and line.attempt > 1:
        line.markers.append(Marker(line.started_at or line.bound_at, "resume", f"resumed from step {line.resume_step}"))
    if (is_failure_outcome(line.outcome) or line.outcome == "lost") and end is not None:
        line.markers.append(Marker(end, "failed", f"attempt {line.outcome}"))
    line.markers.sort(key=lambda m: m.at)


def timeline_chart(lines: Sequence[AttemptLine], *, now: datetime) -> dict[str, Any]:
    """Chart.js data: a row per attempt, bars (starting, running) coloured by
    market, and markers for notices, checkpoints, resumes and failures."""
    rows = [f"{ln.label} {ln.where}" for ln in lines]
    bars: list[dict[str, Any]] = []
    markers: list[dict[str, Any]] = []
    for row, ln in zip(rows, lines, strict=True):
        market = ln.instance.market.value if ln.instance else "unknown"
        end = ln.ended_at or now
        started = ln.started_at if ln.started_at is not None and ln.started_at <= end else None
        if started is None or started > ln.bound_at:
            bars.append({"row": row, "start": epoch_ms(ln.bound_at), "end": epoch_ms(started or end),
                         "phase": "starting", "market": market})  # fmt: skip
        if started is not None:
            bars.append({"row": row, "start": epoch_ms(started), "end": epoch_ms(end), "phase": "running",
                         "market": market})  # fmt: skip
        markers.extend({"row": row, "at": epoch_ms(m.at), "kind": m.kind, "text": m.text} for m in ln.markers)
    return {"rows": rows, "bars": bars, "markers": markers, "now": epoch_ms(now)}


LOG_TAIL_BYTES = 64 * 1024


def log_tail(log_path: Callable[[str, int], Path], job: Job, *, lines: int = 200) -> str:
    """The last ``lines`` lines of the job's logs (node 0), newest attempt last,
    reading at most 64 KiB from the end of each attempt's file."""
    parts: list[str] = []
    for n in range(max(job.attempt, 1), 0, -1):
        path = log_path(job.id, n)
        if not path.exists():
            continue
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(size - LOG_TAIL_BYTES, 0))
            text = fh.read().decode("utf-8", errors="replace")
        parts.insert(0, f"===== attempt {n} =====\n{text}")
        if sum(p.count("\n") for p in parts) >= lines:
            break
    return "\n".join("".join(parts).splitlines()[-lines:])
