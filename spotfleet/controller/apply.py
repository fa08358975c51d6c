"""Step 3 of ``plan()``: apply a policy's commands to the state machines, validating each.

The policy proposes; this module disposes. A command that would break an
invariant is rejected (and logged) instead of applied:

- a job is bound only to schedulable instances with room for it, all nodes at once;
- an instance holding a non-interruptible job is never terminated or drained by
  a policy (only the cloud can take it);
- launches never push the spend rate over a budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spotfleet.controller.step import StepState
from spotfleet.model.capacity import Usage
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import ACTIVE_JOB_STATES, JobState
from spotfleet.model.snapshot import Bind, Command, Drain, Launch, Preempt, Terminate

I = InstanceState  # noqa: E741


@dataclass(frozen=True, slots=True)
class Rejected:
    command: Command
    reason: str


def spend_rate(instances: Sequence[Instance]) -> float:
    """USD/hour of the live instances that are still being paid for."""
    return sum(i.offering.price_per_hour for i in instances if i.live and i.state is not I.TERMINATING)


def apply_commands(step: StepState, commands: Sequence[Command]) -> list[Rejected]:
    rejected: list[Rejected] = []
    usage = step.usage()
    for command in commands:
        reason = _apply(step, usage, command)
        if reason is not None:
            rejected.append(Rejected(command, reason))
            step.event("plan.rejected", f"{type(command).__name__} rejected: {reason}", level="warning")
    return rejected


def _apply(step: StepState, usage: Usage, command: Command) -> str | None:
    snap = step.snapshot
    if isinstance(command, Launch):
        if command.instance_id in snap.instances:
            return f"instance id {command.instance_id} already exists"
        over = _over_budget(step, command)
        if over:
            return over
        inst = Instance(
            id=command.instance_id, offering=command.offering, request_id=command.instance_id,
            state=I.REQUESTED, created_at=step.now, state_since=step.now, message=command.reason,
            reserved_for=command.reserved_for,
        )  # fmt: skip
        step.add_instance(inst)
        step.event("instance.requested", f"buying {command.offering.instance_type} {command.offering.market.value} "
                   f"in {command.offering.zone} at ${command.offering.price_per_hour:.3f}/h: {command.reason}",
                   instance=inst)  # fmt: skip
        return None
    if isinstance(command, Bind):
        job = snap.jobs.get(command.job_id)
        if job is None or job.state is not JobState.PENDING:
            return f"job {command.job_id} is not pending"
        held = job.retry_not_before
        if held is not None and held > step.now:
            return f"job {job.id} waits for its retry backoff until {held:%H:%M:%S}"
        avoided = snap.avoid.get(job.id, frozenset()) & {b.instance_id for b in command.bindings}
        if avoided:
            return f"job {job.id} failed on {', '.join(sorted(avoided))} in a node-looking way; not placed there again"
        if len(command.bindings) != job.spec.resources.nodes:
            return (
                f"job {job.id} needs {job.spec.resources.nodes} nodes, got {len(command.bindings)} (gang: all or none)"
            )
        for b in command.bindings:
            target = snap.instances.get(b.instance_id)
            if target is None or not target.schedulable:
                return f"instance {b.instance_id} is not schedulable"
            if not (b.mig_slices or b.gpu_fraction) and len(b.gpu_indices) != job.spec.resources.gpus:
                return f"job {job.id} needs {job.spec.resources.gpus} GPUs per node, binding has {len(b.gpu_indices)}"
            problem = usage.conflict(target, b)
            if problem:
                return problem
        usage.add(job.id, command.bindings)
        step.bind(job, command.bindings, reason=command.reason)
        return None
    if isinstance(command, Terminate):
        victim = snap.instances.get(command.instance_id)
        if victim is None or not victim.live or victim.state is I.TERMINATING:
            return f"instance {command.instance_id} is not live"
        active = [j for j in snap.jobs_on(victim.id) if j.state in ACTIVE_JOB_STATES]
        if active:
            return f"instance {victim.id} still runs {', '.join(j.id for j in active)}; drain it first"
        if victim.state is I.REQUESTED:
            step.instance_to(victim, I.FAILED, reason=f"cancelled before launch: {command.reason}")
        else:
            step.instance_to(victim, I.TERMINATING, reason=command.reason)
        return None
    if isinstance(command, Drain):
        drained = snap.instances.get(command.instance_id)
        if drained is None or drained.state not in (I.PROVISIONING, I.RUNNING):
            return f"instance {command.instance_id} cannot be drained in its state"
        pinned = [j for j in snap.jobs_on(drained.id) if j.state in ACTIVE_JOB_STATES and not j.spec.is_interruptible]
        if pinned and command.kind is None:
            return f"instance {drained.id} runs non-interruptible {', '.join(j.id for j in pinned)}"
        deadline = command.deadline or step.now + step.settings.drain_grace
        drained.cordoned = True
        if command.for_job is not None:
            drained.reserved_for = command.for_job  # the budget it frees is held for that job (policies/market.py)
        step.instance_to(drained, I.DRAINING, reason=command.reason)
        step.drain_jobs(drained, deadline=deadline, reason=command.reason)
        return None
    if isinstance(command, Preempt):
        job = snap.jobs.get(command.job_id)
        if job is None or job.state is not JobState.RUNNING:
            return f"job {command.job_id} is not running"
        if not job.spec.is_interruptible:
            return f"job {job.id} is not interruptible"
        job.drain_deadline = step.now + step.settings.drain_grace
        step.job_to(job, JobState.DRAINING, reason=f"preempted: {command.reason}")
        return None
    raise TypeError(f"unknown command {command!r}")


def _over_budget(step: StepState, launch: Launch) -> str | None:
    """Would this launch push the global spend rate over its cap? (Per-tenant
    caps are the policy's to honour: which tenant an instance serves is a
    placement decision.) The running total is computed once per step."""
    budgets = [b for b in step.snapshot.budgets if b.tenant is None]
    if not budgets:
        return None
    if step.spend_rate is None:
        step.spend_rate = spend_rate(list(step.snapshot.instances.values()))
    price = launch.offering.price_per_hour
    for budget in budgets:
        if step.spend_rate + price > budget.max_per_hour + 1e-9:
            return f"global budget ${budget.max_per_hour:.2f}/h would be exceeded (${step.spend_rate + price:.2f}/h)"
    step.spend_rate += price
    return None
