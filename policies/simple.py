"""The walking skeleton's policy: cheapest fit, by priority class.

- ``critical`` jobs run on on-demand capacity; ``opportunistic`` ones only on
  spot; ``normal`` ones take the cheapest of either.
- Existing capacity is filled first (best fit: fewest free GPUs left over),
  then the cheapest compatible offering is bought.
- Gang jobs get all their nodes in one zone of one instance type, or wait.
- An instance idle longer than the TTL is given back.
- When an instance gets a reclaim notice (or a rebalance recommendation), a
  replacement is bought *at once*, reserved for the jobs being drained, so they
  resume as soon as they have checkpointed instead of waiting for a launch.

The real cost/performance policies live beside this one; this stays as the
smallest policy that exercises every seam.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from spotfleet.model.capacity import Usage
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Binding, Job, JobState
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.model.snapshot import Bind, Command, Launch, Snapshot, Terminate
from spotfleet.model.spec import Priority


def allowed_markets(job: Job) -> frozenset[Market]:
    if job.spec.priority is Priority.CRITICAL or not job.spec.is_interruptible:
        return frozenset({Market.ON_DEMAND})
    if job.spec.priority is Priority.OPPORTUNISTIC:
        return frozenset({Market.SPOT})
    return frozenset({Market.SPOT, Market.ON_DEMAND})


def queue_order(jobs: list[Job]) -> list[Job]:
    """Most important first, then first come first served."""
    return sorted(jobs, key=lambda j: (-j.spec.priority.rank, j.created_at, j.id))


@dataclass
class SimplePolicy:
    idle_ttl: timedelta = timedelta(minutes=5)
    name: str = "simple"

    def decide(self, snapshot: Snapshot) -> list[Command]:
        commands: list[Command] = []
        usage = Usage(snapshot.jobs.values())
        offerings = snapshot.usable_offerings()
        new: list[Instance] = []
        pending = [j for j in snapshot.jobs.values() if j.state is JobState.PENDING and not j.cancel_requested]
        for job in queue_order(pending):
            bindings = self._fit_reserved(job, snapshot, usage, new) or self._fit_existing(job, snapshot, usage, new)
            reason = (
                "reserved replacement" if bindings and _reserved_for(snapshot, bindings) == job.id else "cheapest fit"
            )
            if bindings is None:
                bindings = self._buy(job, snapshot, offerings, commands, new)
            if bindings is None:
                continue
            usage.add(job.id, bindings)
            commands.append(Bind(job.id, bindings, reason=reason))
        self._replacements(snapshot, usage, offerings, commands, new)
        commands.extend(self._scale_down(snapshot, usage))
        return commands

    def _replacements(self, snapshot: Snapshot, usage: Usage, offerings: Offerings, commands: list[Command],
                      new: list[Instance]) -> None:  # fmt: skip
        """Buy capacity now for jobs on instances the cloud is about to take."""
        reserved = {i.reserved_for for i in [*snapshot.instances.values(), *new] if i.live and i.reserved_for}
        for job in queue_order([j for j in snapshot.jobs.values() if j.state in (JobState.DRAINING, JobState.RUNNING)]):
            if job.id in reserved or not _threatened(snapshot, job):
                continue
            if self._fit_existing(job, snapshot, usage, new) is not None:
                continue  # there is room already; it will be used when the job is requeued
            self._buy(job, snapshot, offerings, commands, new, reserved_for=job.id)

    def _fit_reserved(
        self, job: Job, snapshot: Snapshot, usage: Usage, new: list[Instance]
    ) -> tuple[Binding, ...] | None:
        """Every node on capacity bought for this job ahead of its reclaim, if it is all there."""
        gpus = job.spec.resources.gpus
        mine = [
            i for i in [*snapshot.instances.values(), *new]
            if i.reserved_for == job.id and i.schedulable and len(usage.free_gpus(i)) >= gpus
        ]  # fmt: skip
        if len(mine) < job.spec.resources.nodes:
            return None
        mine.sort(key=lambda i: i.id)
        return tuple(
            Binding(rank, i.id, tuple(usage.free_gpus(i)[:gpus]))
            for rank, i in enumerate(mine[: job.spec.resources.nodes])
        )

    def _fit_existing(
        self, job: Job, snapshot: Snapshot, usage: Usage, new: list[Instance]
    ) -> tuple[Binding, ...] | None:
        if job.spec.resources.nodes != 1:
            return None  # gangs get fresh nodes in one zone
        req = job.spec.node_requirements()
        markets = allowed_markets(job)
        best: tuple[int, Instance, list[int]] | None = None
        for inst in [*snapshot.instances.values(), *new]:
            if not inst.schedulable or inst.market not in markets or not inst.offering.fits(req):
                continue
            if inst.id in snapshot.avoid.get(job.id, ()):
                continue  # its last attempt there failed in a node-looking way
            if inst.reserved_for not in (None, job.id) and _still_needs(snapshot, inst.reserved_for):
                continue  # bought for a job being drained elsewhere
            free = usage.free_gpus(inst)
            if len(free) < req.gpus:
                continue
            leftover = len(free) - req.gpus
            if best is None or leftover < best[0]:
                best = (leftover, inst, free)
        if best is None:
            return None
        _, inst, free = best
        return (Binding(0, inst.id, tuple(free[: req.gpus])),)

    def _buy(self, job: Job, snapshot: Snapshot, offerings: Offerings, commands: list[Command],
             new: list[Instance], *, reserved_for: str | None = None) -> tuple[Binding, ...] | None:  # fmt: skip
        req = job.spec.node_requirements()
        markets = allowed_markets(job)
        choice: Offering | None = offerings.compatible(req).where(lambda o: o.market in markets).cheapest()
        if choice is None:
            return None
        bindings = []
        nodes = job.spec.resources.nodes
        # A gang shares one placement group per attempt (as the placer names it): a
        # requeued gang gets a fresh group wherever it lands next.
        group = f"pg-{job.id}-{job.attempt}" if nodes > 1 else None
        for rank in range(nodes):
            instance_id = snapshot.new_id("sf")
            why = (
                f"replacement for {job.id} ({job.spec.name}) ahead of a reclaim"
                if reserved_for
                else f"for {job.id} ({job.spec.name})"
            )
            commands.append(Launch(instance_id, choice, reason=why, placement_group=group, reserved_for=reserved_for))
            inst = Instance(id=instance_id, offering=choice, request_id=instance_id, state=InstanceState.REQUESTED,
                            created_at=snapshot.now, state_since=snapshot.now, reserved_for=reserved_for)  # fmt: skip
            new.append(inst)
            bindings.append(Binding(rank, instance_id, tuple(range(req.gpus))))
        return tuple(bindings)

    def _scale_down(self, snapshot: Snapshot, usage: Usage) -> list[Command]:
        out: list[Command] = []
        for inst in snapshot.instances.values():
            if inst.state is not InstanceState.RUNNING or usage.jobs_on(inst.id):
                continue
            if inst.idle_since is not None and snapshot.now - inst.idle_since >= self.idle_ttl:
                out.append(Terminate(inst.id, reason=f"idle for {self.idle_ttl}"))
        return out


def _threatened(snapshot: Snapshot, job: Job) -> bool:
    """Is the job on an instance the cloud announced it will take (or may take)?"""
    return any(
        (inst := snapshot.instances.get(i)) is not None and inst.notice_kind is not None for i in job.instance_ids
    )


def _still_needs(snapshot: Snapshot, job_id: str) -> bool:
    job = snapshot.jobs.get(job_id)
    return job is not None and job.state in (JobState.PENDING, JobState.DRAINING, JobState.RUNNING)


def _reserved_for(snapshot: Snapshot, bindings: tuple[Binding, ...]) -> str | None:
    inst = snapshot.instances.get(bindings[0].instance_id)
    return inst.reserved_for if inst is not None else None
