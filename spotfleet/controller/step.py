"""``StepState``: the snapshot being planned plus the record of what changed.

Every state change in a step goes through here, so the store write at the end
(``changes``) and the audit log can never miss one: a job leaving an attempt
always closes that attempt's ledger rows, a job being bound always opens them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from spotfleet.controller.settings import PlanSettings
from spotfleet.model.capacity import Usage
from spotfleet.model.changes import AttemptEnd, AttemptRunning, AttemptStart, Changes, EventRecord
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import ACTIVE_JOB_STATES, Binding, Job, JobState, progress_at_checkpoint
from spotfleet.model.snapshot import Snapshot


@dataclass(slots=True)
class StepState:
    snapshot: Snapshot
    settings: PlanSettings
    changes: Changes = field(default_factory=Changes)
    changed_jobs: dict[str, Job] = field(default_factory=dict)
    changed_instances: dict[str, Instance] = field(default_factory=dict)
    new_instances: dict[str, Instance] = field(default_factory=dict)
    spend_rate: float | None = None  # USD/h of live instances, kept up to date by launches in this step

    @property
    def now(self) -> datetime:
        return self.snapshot.now

    def usage(self) -> Usage:
        return Usage(self.snapshot.jobs.values())

    # ------------------------------------------------------------ events

    def event(self, kind: str, message: str, *, level: str = "info", job: Job | None = None,
              instance: Instance | None = None, **data: object) -> None:  # fmt: skip
        self.changes.events.append(EventRecord(
            at=self.now, kind=kind, message=message, level=level,
            job_id=job.id if job else None, instance_id=instance.id if instance else None, data=dict(data),
        ))  # fmt: skip

    # ------------------------------------------------------------ jobs

    def _touch_job(self, job: Job) -> None:
        self.changed_jobs[job.id] = job

    def job_to(self, job: Job, state: JobState, *, reason: str, outcome: str | None = None) -> None:
        """Transition a job; leaving an active state closes its attempt."""
        was_active = job.state in ACTIVE_JOB_STATES
        job.transition(state, at=self.now, reason=reason)
        if was_active and state not in ACTIVE_JOB_STATES:
            self.changes.attempts_ended.append(AttemptEnd(job.id, job.attempt, outcome or state.value, self.now))
            job.bindings = ()
            job.drain_deadline = None
        if state is JobState.RUNNING:
            self.changes.attempts_running.append(AttemptRunning(job.id, job.attempt, self.now))
        self._touch_job(job)
        self.event(f"job.{state.value}", f"{job.id} ({job.spec.name}) → {state.value}: {reason}", job=job)

    def bind(self, job: Job, bindings: tuple[Binding, ...], *, reason: str) -> None:
        job.attempt += 1
        job.bindings = bindings
        job.transition(JobState.BOUND, at=self.now, reason=reason)
        self._touch_job(job)
        for b in bindings:
            gpus = len(b.gpu_indices) if not (b.mig_slices or b.gpu_fraction) else 0
            self.changes.attempts_started.append(
                AttemptStart(
                    job.id, job.attempt, b.node_rank, b.instance_id, gpus, b.mig_slices, self.now, gpu_share=b.gpu_share
                )
            )
            inst = self.snapshot.instances[b.instance_id]
            if inst.idle_since is not None:
                inst.idle_since = None
                self.touch_instance(inst)
        where = ", ".join(sorted({b.instance_id for b in bindings}))
        self.event(
            "job.bound", f"{job.id} ({job.spec.name}) bound to {where} (attempt {job.attempt}): {reason}", job=job
        )

    def requeue(self, job: Job, *, reason: str, outcome: str, interrupted: bool = False) -> None:
        """Back to PENDING to resume from its last checkpoint: the progress the
        deadline rules read rolls back to that checkpoint's step too
        (``progress_at_checkpoint``), so work the attempt did not save stops counting."""
        if interrupted:
            job.interruptions += 1
        resumed = progress_at_checkpoint(job.progress, job.checkpoint)
        if resumed is not job.progress:
            reason += f"; progress rolled back from step {job.progress['step']} to the checkpoint's {resumed['step']}"
            job.progress = resumed
        self.job_to(job, JobState.PENDING, reason=reason, outcome=outcome)

    def touch_job(self, job: Job) -> None:
        self._touch_job(job)

    # ------------------------------------------------------------ instances

    def drain_jobs(self, inst: Instance, *, deadline: datetime, reason: str) -> None:
        """Ask every job on ``inst`` to checkpoint and leave by ``deadline``; unstarted ones are simply re-placed."""
        for job in self.snapshot.jobs_on(inst.id):
            if job.state is JobState.RUNNING:
                job.drain_deadline = deadline
                self.job_to(job, JobState.DRAINING, reason=f"checkpoint requested: {reason}")
            elif job.state is JobState.BOUND:
                self.requeue(job, reason=f"not started yet; replaced: {reason}", outcome="unbound")
            elif job.state is JobState.DRAINING and job.drain_deadline is not None:
                job.drain_deadline = min(job.drain_deadline, deadline)
                self.touch_job(job)

    def lose_instance(self, inst: Instance, *, reason: str) -> None:
        """The instance is gone: requeue its jobs from their last checkpoint."""
        for job in self.snapshot.jobs_on(inst.id):
            if job.state in ACTIVE_JOB_STATES:
                if job.state is JobState.BOUND:
                    self.requeue(job, reason=f"capacity lost before start: {reason}", outcome="unbound")
                else:
                    self.requeue(job, reason=f"instance lost: {reason}; resuming from last checkpoint",
                                 outcome="lost", interrupted=True)  # fmt: skip
        if inst.state is InstanceState.REQUESTED:
            self.instance_to(inst, InstanceState.FAILED, reason=reason)
        elif inst.live:
            self.instance_to(inst, InstanceState.TERMINATED, reason=reason)

    def touch_instance(self, inst: Instance) -> None:
        if inst.id not in self.new_instances:
            self.changed_instances[inst.id] = inst

    def instance_to(self, inst: Instance, state: InstanceState, *, reason: str, level: str = "info") -> None:
        inst.transition(state, at=self.now, reason=reason)
        self.touch_instance(inst)
        self.event(f"instance.{state.value}", f"{inst.id} ({inst.offering.instance_type} {inst.market.value} "
                   f"{inst.offering.zone}) → {state.value}: {reason}", level=level, instance=inst)  # fmt: skip

    def add_instance(self, inst: Instance) -> None:
        self.snapshot.instances[inst.id] = inst
        self.new_instances[inst.id] = inst

    def mark_unavailable(self, key: str, until: datetime, reason: str) -> None:
        self.snapshot.unavailable[key] = until
        self.changes.unavailable[key] = (until, reason)

    def finalize(self) -> Changes:
        """The store changes of this step (jobs and instances de-duplicated)."""
        self.changes.jobs = list(self.changed_jobs.values())
        self.changes.instances = [i for i in self.changed_instances.values() if i.id not in self.new_instances]
        return self.changes
