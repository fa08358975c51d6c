"""Step 1 of ``plan()``: apply observed facts to the job and instance state machines.

Facts come from four places, each handled by one function, in this order:

1. cancel requests written by the API;
2. interruption notices (from agents or the clouds' event buses), de-duplicated;
3. what the providers list (adopt launched instances, notice vanished ones,
   terminate leaked ones) and agent presence (registered, silent);
4. node reports: started, exited with which code, last checkpoint, progress.

A node the agent *refused* (it cannot give the job its GPU share there: no
MIG device of its profile, MIG mode off…) puts the job back in the queue —
not a failure — and the agent's report marks the instance type unfit, so the
planner does not send it back. A node the agent *stopped* for going over its
GPU memory share fails the job with the agent's reason and no retry: the
same job would exceed the same share again.

Exit codes: 0 is success; ``CHECKPOINTED_EXIT_CODE`` means "I saved a checkpoint,
resume me" (an interruption, not a failure); anything else is a failure, retried
up to ``max_retries`` — except while draining, where a kill after the grace
period is expected and the job resumes from its last periodic checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from spotfleet.controller.step import StepState
from spotfleet.model.changes import PendingNotice
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import (
    ACTIVE_JOB_STATES,
    NODE_FAILED,
    RETRY_BACKOFF_BASE,
    RETRY_BACKOFF_MAX,
    RETRY_REASON,
    Job,
    JobState,
    node_failure,
)
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import NodeReport
from spotfleet.providers.base import CloudState, ProviderInstance
from spotfleet.wire import CHECKPOINTED_EXIT_CODE  # "checkpointed, resume me" (docs/checkpointing.md)

I = InstanceState  # noqa: E741
J = JobState


@dataclass(frozen=True, slots=True)
class Observation:
    """What the providers said this step. A provider missing from ``listed`` was
    not listed (an API error): absence of its instances then proves nothing."""

    listed: Mapping[str, Sequence[ProviderInstance]] = field(default_factory=dict)
    notices: Sequence[PendingNotice] = ()


def sync(step: StepState, observation: Observation) -> list[ProviderInstance]:
    """Apply every observed fact; returns leaked cloud instances to terminate."""
    apply_cancels(step)
    apply_notices(step, observation.notices)
    orphans = apply_listing(step, observation.listed)
    apply_presence(step)
    apply_reports(step)
    update_idle(step)
    return orphans


# ---------------------------------------------------------------- 1. cancels


def apply_cancels(step: StepState) -> None:
    for job in list(step.snapshot.jobs.values()):
        if job.cancel_requested and not job.terminal:
            step.job_to(job, J.CANCELLED, reason="cancelled by user", outcome="cancelled")


# ---------------------------------------------------------------- 2. notices


def _instance_by_provider_id(step: StepState) -> dict[tuple[str, str], Instance]:
    return {(i.provider, i.provider_id): i for i in step.snapshot.instances.values() if i.provider_id}


def apply_notices(step: StepState, notices: Sequence[PendingNotice]) -> None:
    by_pid = _instance_by_provider_id(step)
    for pending in notices:
        step.changes.notices_processed.append(pending.id)
        inst = by_pid.get((pending.event.provider, pending.event.provider_instance_id))
        if inst is None or not inst.live:
            continue  # foreign instance, or one already gone: nothing to do
        handle_notice(step, inst, pending.event)


def handle_notice(step: StepState, inst: Instance, event: InstanceEvent) -> None:
    """Drain on a reclaim notice; cordon on a soft one. Idempotent per (instance, kind)."""
    if event.kind is NoticeKind.TERMINATED:
        step.lose_instance(inst, reason=f"terminated by the cloud ({event.source or 'event'})")
        return
    if event.kind.hard:
        if inst.state in (I.DRAINING, I.TERMINATING) and inst.notice_kind is event.kind:
            return  # duplicate notice
        deadline = event.deadline or step.now + step.settings.drain_grace
        if inst.market is Market.SPOT:
            step.mark_unavailable(inst.offering.key, step.now + step.settings.interrupted_backoff,
                                  f"spot interruption of {inst.id}")  # fmt: skip
        inst.notice_kind, inst.notice_deadline, inst.cordoned = event.kind, deadline, True
        if inst.state in (I.PROVISIONING, I.RUNNING):
            step.instance_to(inst, I.DRAINING, reason=f"{event.kind.value} notice, reclaim at {deadline:%H:%M:%S}")
        else:
            step.touch_instance(inst)
        step.drain_jobs(inst, deadline=deadline, reason=f"{event.kind.value} on {inst.id}")
        return
    # soft signals: rebalance recommendation, maintenance: no new placements here
    if not inst.cordoned or inst.notice_kind is None:
        inst.cordoned, inst.notice_kind = True, event.kind
        inst.notice_deadline = event.deadline
        step.touch_instance(inst)
        step.event("instance.cordoned", f"{inst.id} cordoned: {event.kind.value}", instance=inst)


# ---------------------------------------------------------------- 3. listing & presence


def apply_listing(step: StepState, listed: Mapping[str, Sequence[ProviderInstance]]) -> list[ProviderInstance]:
    now, settings = step.now, step.settings
    orphans: list[ProviderInstance] = []
    for provider, seen in listed.items():
        by_request = {p.request_id: p for p in seen if p.request_id}
        ours = [i for i in step.snapshot.instances.values() if i.provider == provider]
        known_requests = {i.request_id for i in ours}
        for inst in ours:
            cloud = by_request.get(inst.request_id)
            if inst.state is I.REQUESTED:
                if cloud is not None and cloud.state is not CloudState.TERMINATED:
                    adopt(step, inst, cloud)
                elif now - inst.created_at > settings.request_timeout:
                    step.lose_instance(inst, reason="launch never confirmed by the cloud")
                continue
            if cloud is None or cloud.state is CloudState.TERMINATED:
                if cloud is None and now - (inst.launched_at or inst.created_at) < settings.vanish_grace:
                    continue  # eventual consistency: too new to be missing
                step.lose_instance(inst, reason="no longer listed by the cloud" if cloud is None else "terminated")
            elif inst.address != cloud.address and cloud.address:
                inst.address = cloud.address
                step.touch_instance(inst)
        orphans.extend(c for c in seen if c.state is not CloudState.TERMINATED and c.request_id not in known_requests)
    return orphans


def adopt(step: StepState, inst: Instance, cloud: ProviderInstance) -> None:
    """A launch recorded as REQUESTED turned out to have succeeded (e.g. after a crash)."""
    inst.provider_id = cloud.provider_id
    inst.launched_at = cloud.launched_at or step.now
    inst.address = cloud.address
    step.instance_to(inst, I.PROVISIONING, reason=f"adopted {cloud.provider_id} found by its request-id tag")


def apply_presence(step: StepState) -> None:
    now, settings = step.now, step.settings
    for inst in list(step.snapshot.instances.values()):
        seen = step.snapshot.presence.get(inst.id)
        if inst.state is I.PROVISIONING:
            if seen is not None:
                step.instance_to(inst, I.RUNNING, reason="agent registered")
            elif inst.launched_at and now - inst.launched_at > settings.boot_timeout:
                step.drain_jobs(inst, deadline=now, reason="agent never registered")
                for job in step.snapshot.jobs_on(inst.id):
                    if job.state is J.DRAINING:
                        step.requeue(job, reason="agent never registered", outcome="lost")
                step.instance_to(inst, I.TERMINATING, reason=f"agent did not register within {settings.boot_timeout}",
                                 level="warning")  # fmt: skip
        elif (
            inst.state in (I.RUNNING, I.DRAINING) and seen is not None and now - seen.last_seen > settings.agent_timeout
        ):
            for job in step.snapshot.jobs_on(inst.id):
                if job.state in ACTIVE_JOB_STATES:
                    step.requeue(job, reason=f"agent on {inst.id} silent since {seen.last_seen:%H:%M:%S}",
                                 outcome="lost", interrupted=True)  # fmt: skip
            step.instance_to(inst, I.TERMINATING, reason="agent stopped heartbeating", level="warning")


# ---------------------------------------------------------------- 4. reports


def apply_reports(step: StepState) -> None:
    reports = step.snapshot.reports
    for job in list(step.snapshot.jobs.values()):
        if job.state not in ACTIVE_JOB_STATES or not job.bindings:
            continue
        nodes = [_own_report(reports.get((job.id, job.attempt, b.node_rank)), b.instance_id) for b in job.bindings]
        seen = [r for r in nodes if r is not None]
        for r in seen:
            if r.checkpoint is not None and (job.checkpoint is None or r.checkpoint.at > job.checkpoint.at):
                # stamped with where it was written: resuming it in another region or cloud moves it
                inst = step.snapshot.instances.get(r.instance_id)
                job.checkpoint = r.checkpoint if inst is None else replace(
                    r.checkpoint, provider=inst.offering.provider, region=inst.offering.region)  # fmt: skip
                step.touch_job(job)
            if r.progress and dict(r.progress) != job.progress and r.node_rank == 0:
                job.progress = dict(r.progress)
                step.touch_job(job)
        refused = [r for r in seen if r.status == "refused"]
        if refused:
            r = refused[0]
            step.requeue(job, reason=f"refused by the agent on {r.instance_id}: {r.message or 'no reason given'}",
                         outcome="refused")  # fmt: skip
            continue
        exited = [r for r in seen if r.status == "exited"]
        stopped = [r.message for r in exited if r.message]
        if stopped and any(r.exit_code != 0 for r in exited):
            if job.state is J.BOUND:
                step.job_to(job, J.RUNNING, reason="started")
            job.exit_code = next((r.exit_code for r in exited if r.exit_code != 0), None)
            step.job_to(job, J.FAILED, reason=f"stopped by the agent: {stopped[0]}", outcome="stopped")
        elif exited:
            blame = next((b for r in exited if (b := node_failure(r.exit_code, r.node_error))), None)
            settle_exit(step, job, exit_codes=[r.exit_code for r in exited], all_exited=len(exited) == len(nodes),
                        node_blame=blame)  # fmt: skip
        elif job.state is J.BOUND and len(seen) == len(nodes):
            step.job_to(job, J.RUNNING, reason="started on every node")


def _own_report(report: NodeReport | None, instance_id: str) -> NodeReport | None:
    """A node's report counts only when it came from the instance the node is bound to."""
    return report if report is not None and report.instance_id == instance_id else None


def settle_exit(
    step: StepState, job: Job, *, exit_codes: list[int | None], all_exited: bool, node_blame: str | None = None
) -> None:
    codes = [c if c is not None else -1 for c in exit_codes]
    failed = [c for c in codes if c not in (0, CHECKPOINTED_EXIT_CODE)]
    if job.state is J.BOUND:
        step.job_to(job, J.RUNNING, reason="started")
    if not failed and all(c == 0 for c in codes):
        if all_exited:
            job.exit_code = 0
            step.job_to(job, J.SUCCEEDED, reason="exited 0 on every node", outcome="succeeded")
        return
    if not failed:  # someone checkpointed and asked to be resumed
        step.requeue(job, reason="checkpointed; will resume from it", outcome="checkpointed",
                     interrupted=job.state is J.DRAINING)  # fmt: skip
        return
    code = failed[0]
    job.exit_code = code
    if job.state is J.DRAINING:
        step.requeue(job, reason=f"stopped while draining (exit {code}); resuming from last periodic checkpoint",
                     outcome="interrupted", interrupted=True)  # fmt: skip
        return
    job.failures += 1
    outcome = NODE_FAILED if node_blame else "failed"
    if job.failures > job.spec.max_retries:
        step.job_to(job, J.FAILED, reason=f"exited {code}; no retries left ({job.spec.max_retries})", outcome=outcome)
    else:
        # Backoff and avoidance (issue 14): the retry waits (``Job.retry_not_before``),
        # and after a node-looking failure it keeps off the instance (``Snapshot.avoid``).
        where = ", ".join(sorted(set(job.instance_ids)))
        delay = min(RETRY_BACKOFF_BASE * (1 << min(job.failures - 1, 20)), RETRY_BACKOFF_MAX).total_seconds()
        avoid = f"; {node_blame}: avoiding {where}" if node_blame else ""
        if node_blame:
            step.snapshot.avoid[job.id] = step.snapshot.avoid.get(job.id, frozenset()) | set(job.instance_ids)
        step.requeue(job, reason=f"{RETRY_REASON} {code}; retry {job.failures}/{job.spec.max_retries} "
                                 f"in {delay:.0f}s{avoid}", outcome=outcome)  # fmt: skip


def update_idle(step: StepState) -> None:
    """Track since when each instance has had no job (the idle TTL reads it)."""
    busy = {b.instance_id for j in step.snapshot.jobs.values() if j.state in ACTIVE_JOB_STATES for b in j.bindings}
    for inst in step.snapshot.instances.values():
        if not inst.live:
            continue
        if inst.id in busy:
            if inst.idle_since is not None:
                inst.idle_since = None
                step.touch_instance(inst)
        elif inst.idle_since is None and inst.state in (I.PROVISIONING, I.RUNNING, I.DRAINING):
            inst.idle_since = step.now
            step.touch_instance(inst)
