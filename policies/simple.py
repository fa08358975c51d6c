"""The walking skeleton's policy: cheapest fit, by priority class.

- ``critical`` jobs run on on-demand capacity; ``opportunistic`` ones only on
  spot; ``normal`` ones take the cheapest of either.
- Existing capacity is filled first (best fit: fewest free GPUs left over),
  then the cheapest compatible offering is bought.
- Gang jobs get all their nodes in one zone of one instance type, or wait.
- An instance idle longer than the TTL is given back.

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
            bindings = self._fit_existing(job, snapshot, usage, new)
            if bindings is None:
                bindings = self._buy(job, snapshot, offerings, commands, new)
            if bindings is None:
                continue
            usage.add(job.id, bindings)
            commands.append(Bind(job.id, bindings, reason="cheapest fit"))
        commands.extend(self._scale_down(snapshot, usage))
        return commands

    def _fit_existing(self, job: Job, snapshot: Snapshot, usage: Usage, new: list[Instance]) -> tuple[Binding, ...] | None:
        if job.spec.resources.nodes != 1:
            return None  # gangs get fresh nodes in one zone
        req = job.spec.node_requirements()
        markets = allowed_markets(job)
        best: tuple[int, Instance, list[int]] | None = None
        for inst in [*snapshot.instances.values(), *new]:
            if not inst.schedulable or inst.market not in markets or not inst.offering.fits(req):
                continue
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
             new: list[Instance]) -> tuple[Binding, ...] | None:  # fmt: skip
        req = job.spec.node_requirements()
        markets = allowed_markets(job)
        choice: Offering | None = offerings.compatible(req).where(lambda o: o.market in markets).cheapest()
        if choice is None:
            return None
        bindings = []
        for rank in range(job.spec.resources.nodes):
            instance_id = snapshot.new_id("sf")
            commands.append(Launch(instance_id, choice, reason=f"for {job.id} ({job.spec.name})"))
            inst = Instance(id=instance_id, offering=choice, request_id=instance_id, state=InstanceState.REQUESTED,
                            created_at=snapshot.now, state_since=snapshot.now)  # fmt: skip
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
