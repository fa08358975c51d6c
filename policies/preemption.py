"""Preemption: make room for urgent work by checkpoint-draining opportunistic jobs.

Only when an urgent job (critical, or a deadline job that must run on
on-demand now) could not be placed *and* could not be bought (budget,
capacity, no usable offering). Never a kill: victims get ``Preempt`` (checkpoint
and requeue) or, when a whole instance must go to free budget, ``Drain``.

Victims are interruptible opportunistic jobs of lower priority. Among the ways
to make room, the planner picks the fewest victims first, then the least lost
work — the time since each victim's last checkpoint (or since it started when
it never checkpointed), so the most recently checkpointed go first, like
Volcano's checkpoint-aware preemption. Jobs already DRAINING count as room
that is coming: if they suffice, nothing new is preempted (no pile-up of
victims across reconcile steps).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from spotfleet.model.job import Job, JobState
from spotfleet.model.snapshot import Drain, Preempt
from spotfleet.model.spec import Priority
from spotfleet.policies.capacity import Cap
from spotfleet.policies.placement import Demand, Fleet
from spotfleet.policies.selection import OfferingIndex


def lost_work_s(job: Job, now: datetime) -> float:
    """Seconds of work a checkpoint-drain of ``job`` would throw away."""
    if job.checkpoint is not None and job.checkpoint.attempt == job.attempt:
        return max(0.0, (now - job.checkpoint.at).total_seconds())
    if job.state is JobState.RUNNING:
        return max(0.0, (now - job.state_since).total_seconds())
    return 0.0


PREEMPTION_WINDOW = timedelta(hours=1)


def recent_preemptions(job: Job, now: datetime) -> int:
    """How often ``job`` was preempted (asked to checkpoint for other work) in the last hour."""
    since = now - PREEMPTION_WINDOW
    return sum(1 for h in job.history if h.to_state == JobState.DRAINING.value and h.at >= since
               and "preempted" in h.reason)  # fmt: skip


def is_victim(victim: Job, urgent: Job, *, now: datetime | None = None, per_hour: int | None = None) -> bool:
    """May ``victim`` be preempted for ``urgent``? Opportunistic, interruptible,
    running — and, with ``per_hour``, not already preempted that often in the
    last hour (a job is never made to pay for a preemption storm)."""
    return (
        victim.spec.priority is Priority.OPPORTUNISTIC
        and victim.spec.is_interruptible
        and victim.spec.priority.rank < urgent.spec.priority.rank
        and victim.state is JobState.RUNNING
        and not victim.cancel_requested
        and (per_hour is None or now is None or recent_preemptions(victim, now) < per_hour)
    )


@dataclass(frozen=True, slots=True)
class Plan:
    victims: tuple[Job, ...]
    lost_s: float
    caps: tuple[str, ...]

    @property
    def key(self) -> tuple[int, float, tuple[str, ...]]:
        return (len(self.victims), self.lost_s, self.caps)


def _room_after(
    cap: Cap, demand: Demand, urgent: Job, now: datetime, taken: set[str], per_hour: int | None = None
) -> Plan | None:
    """Fewest / least-loss victims on ``cap`` after which one node fits."""
    sim = cap.clone()
    for job in list(sim.jobs):
        if job.state is JobState.DRAINING:
            for b in job.bindings:
                if b.instance_id == cap.id:
                    sim.release(job, b)
    if sim.fits(demand.shape):
        return Plan((), 0.0, (cap.id,))
    victims = sorted(
        (j for j in sim.jobs if j.id not in taken and is_victim(j, urgent, now=now, per_hour=per_hour)),
        key=lambda j: (lost_work_s(j, now), j.id),
    )
    chosen: list[Job] = []
    for v in victims:
        for b in v.bindings:
            if b.instance_id == cap.id:
                sim.release(v, b)
        chosen.append(v)
        if sim.fits(demand.shape):
            return Plan(tuple(chosen), sum(lost_work_s(j, now) for j in chosen), (cap.id,))
    return None


def choose(
    demand: Demand,
    *,
    fleet: Fleet,
    index: OfferingIndex,
    now: datetime,
    taken: set[str],
    held: set[str],
    per_hour: int | None = None,
) -> Plan | None:
    """The cheapest way (fewest victims, least lost work) to fit ``demand``."""
    urgent = demand.job
    n = demand.shape.nodes
    per_zone: dict[str, list[Plan]] = {}
    for caps in fleet.pools.values():
        if not index.accepts(demand.shape, caps[0].offering, demand.markets):
            continue
        for cap in caps:
            if cap.id in held or not cap.jobs:
                continue
            if not any(
                j.state is JobState.DRAINING or is_victim(j, urgent, now=now, per_hour=per_hour) for j in cap.jobs
            ):
                continue
            plan = _room_after(cap, demand, urgent, now, taken, per_hour)
            if plan is not None:
                per_zone.setdefault(cap.zone, []).append(plan)
    best: Plan | None = None
    for plans in per_zone.values():
        if len(plans) < n:
            continue
        plans.sort(key=lambda p: p.key)
        pick = plans[:n]
        merged = Plan(
            tuple(v for p in pick for v in p.victims),
            sum(p.lost_s for p in pick),
            tuple(c for p in pick for c in p.caps),
        )
        if best is None or merged.key < best.key:
            best = merged
    return best


def preempt(
    blocked: Iterable[Demand],
    *,
    fleet: Fleet,
    index: OfferingIndex,
    now: datetime,
    budget_short: dict[str, float],
    max_jobs: int = 50,
    per_job_per_hour: int | None = None,
) -> tuple[list[Preempt | Drain], dict[str, str]]:
    """Commands that make room for each urgent blocked job, and a note per job.

    ``budget_short`` maps a blocked job id to the USD/h its cheapest launch is
    over the global cap; those jobs may also free budget by draining whole
    instances that hold only victims.
    """
    commands: list[Preempt | Drain] = []
    notes: dict[str, str] = {}
    taken: set[str] = set()  # victims already chosen in this plan
    held: set[str] = set()  # instances promised to an urgent job
    drained: set[str] = set()
    handled = 0
    for demand in blocked:
        if not demand.urgent or demand.virtual:
            continue
        handled += 1
        if handled > max_jobs:  # bounded work per step; the next step continues
            break
        plan = choose(demand, fleet=fleet, index=index, now=now, taken=taken, held=held, per_hour=per_job_per_hour)
        if plan is not None:
            held.update(plan.caps)
            if not plan.victims:
                notes[demand.job.id] = "waiting for draining jobs to leave " + ", ".join(plan.caps)
                continue
            for v in plan.victims:
                taken.add(v.id)
                commands.append(Preempt(v.id, f"preempted for {demand.job.id} ({demand.job.spec.priority.value})"))
            notes[demand.job.id] = f"preempting {len(plan.victims)} job(s) on {', '.join(plan.caps)}"
            continue
        short = budget_short.get(demand.job.id)
        if short is None or short <= 0:
            continue
        # free budget: drain instances whose every job is a victim, cheapest loss per dollar first;
        # instances already draining for this job (earlier steps) count as budget on its way
        draining_release = sum(
            c.offering.price_per_hour
            for c in fleet.caps.values()
            if not c.schedulable and (c.id in drained or c.reserved_for == demand.job.id)
        )
        need = short - draining_release
        options: list[tuple[int, float, float, Cap]] = []
        for cap in fleet.caps.values():
            if not cap.drainable or not cap.schedulable or cap.id in held or cap.touched or not cap.jobs:
                continue  # (touched: this plan just bound or reserved something there)
            if all(
                is_victim(j, demand.job, now=now, per_hour=per_job_per_hour) and j.id not in taken for j in cap.jobs
            ):
                lost = sum(lost_work_s(j, now) for j in cap.jobs)
                options.append((len(cap.jobs), lost, -cap.offering.price_per_hour, cap))
        options.sort(key=lambda t: (t[0], t[1], t[2], t[3].id))
        freed = 0.0
        picked: list[Cap] = []
        for _, _, _, cap in options:
            if freed >= need:
                break
            picked.append(cap)
            freed += cap.offering.price_per_hour
        if freed + 1e-9 < need or not picked:
            continue
        for cap in picked:
            held.add(cap.id)
            drained.add(cap.id)
            taken.update(j.id for j in cap.jobs)
            commands.append(Drain(cap.id, f"preempted to free budget for {demand.job.id}", for_job=demand.job.id))
        notes[demand.job.id] = f"draining {len(picked)} instance(s) to free ${freed:.2f}/h of budget"
    return commands, notes
