"""``plan()``: a pure function of a snapshot (and what the providers said).

::

    sync (observed facts → state machines)
      → policy.decide(snapshot) → commands
      → apply + validate commands
      → built-in housekeeping (drained instances are given back)

No I/O, no wall clock (``snapshot.now``), no sleeping: the live controller, the
simulator and the benchmarks call exactly this. It mutates the snapshot it is
given (the caller owns it) and returns a ``Plan`` saying what to persist and
which cloud calls the executor must make.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from spotfleet.controller.apply import Rejected, apply_commands
from spotfleet.controller.settings import PlanSettings
from spotfleet.controller.step import StepState
from spotfleet.controller.sync import Observation, sync
from spotfleet.model.instance import InstanceState
from spotfleet.model.job import ACTIVE_JOB_STATES
from spotfleet.model.snapshot import Command, Snapshot
from spotfleet.policies.base import Policy
from spotfleet.providers.base import ProviderInstance

I = InstanceState  # noqa: E741


@dataclass(slots=True)
class Plan:
    step: StepState
    commands: list[Command] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    orphans: list[ProviderInstance] = field(default_factory=list)

    @property
    def snapshot(self) -> Snapshot:
        return self.step.snapshot

    @property
    def to_launch(self) -> list[str]:
        """Instances the executor must (still) buy: every REQUESTED one."""
        return [i.id for i in self.snapshot.instances.values() if i.state is I.REQUESTED]

    @property
    def to_terminate(self) -> list[str]:
        return [i.id for i in self.snapshot.instances.values() if i.state is I.TERMINATING]


def plan(
    snapshot: Snapshot,
    policy: Policy,
    *,
    observation: Observation | None = None,
    settings: PlanSettings | None = None,
) -> Plan:
    step = StepState(snapshot, settings or PlanSettings())
    result = Plan(step)
    with gc_paused():
        result.orphans = sync(step, observation or Observation())
        with retry_backoff(snapshot):
            result.commands = policy.decide(snapshot)
        result.rejected = apply_commands(step, result.commands)
        release_drained(step)
    return result


@contextmanager
def retry_backoff(snapshot: Snapshot) -> Iterator[None]:
    """Hide jobs waiting out a retry backoff (``Job.retry_not_before``) from the policy.

    Design choice: a PENDING job holds no capacity, so leaving it out of the
    policy's view changes nothing else; every policy (and baseline) gets the
    backoff without knowing about it, and ``apply`` refuses a Bind of a held
    job anyway. ``explain`` says why the job waits."""
    held = {j.id: j for j in snapshot.jobs.values() if (t := j.retry_not_before) is not None and t > snapshot.now}
    if not held:
        yield
        return
    for job_id in held:
        del snapshot.jobs[job_id]
    try:
        yield
    finally:
        snapshot.jobs.update(held)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for one plan.

    Design choice: a plan allocates tens of thousands of small, acyclic objects
    (bindings, commands, records) on top of a large live snapshot; every young
    collection then also walks that snapshot, which cost ~40 % of plan() at
    10,000 jobs (bench/plan_scale.py). Reference counting still frees everything
    at once; the collector resumes when the plan is done.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def release_drained(step: StepState) -> None:
    """A draining instance whose jobs have all left is given back at once:
    no reason to pay for it until the cloud takes it."""
    for inst in list(step.snapshot.instances.values()):
        if inst.state is I.DRAINING and not any(j.state in ACTIVE_JOB_STATES for j in step.snapshot.jobs_on(inst.id)):
            step.instance_to(inst, I.TERMINATING, reason="drained: every job checkpointed or left")
