"""The policy in force while the fleet is down (``spotfleet down``).

It buys nothing and places nothing. Every instance that holds jobs is drained
(the jobs checkpoint and go back to the queue, keeping their checkpoints, so
``spotfleet resume`` picks them up where they stopped); every empty one is
given back. Critical jobs are drained too: the operator asked for the whole
fleet, and a drain is a checkpoint, not a kill.

Instances not yet accepted by the cloud (``REQUESTED``) that already have jobs
bound are left for one step: the executor launches or fails them, and the next
step drains or terminates what came of it.
"""

from __future__ import annotations

from datetime import timedelta

from spotfleet.model.events import NoticeKind
from spotfleet.model.instance import InstanceState
from spotfleet.model.job import ACTIVE_JOB_STATES
from spotfleet.model.snapshot import Command, Drain, Snapshot, Terminate

I = InstanceState  # noqa: E741


class TeardownPolicy:
    name = "teardown"

    def __init__(self, *, grace: timedelta = timedelta(minutes=2), reason: str = "spotfleet down") -> None:
        self.grace = grace
        self.reason = reason

    def decide(self, snapshot: Snapshot) -> list[Command]:
        commands: list[Command] = []
        for inst in sorted(snapshot.instances.values(), key=lambda i: i.id):
            if not inst.live or inst.state in (I.DRAINING, I.TERMINATING):
                continue  # already on its way out (release_drained gives back drained ones)
            busy = any(j.state in ACTIVE_JOB_STATES for j in snapshot.jobs_on(inst.id))
            if not busy:
                commands.append(Terminate(inst.id, reason=f"{self.reason}: giving the fleet back"))
            elif inst.state in (I.PROVISIONING, I.RUNNING):
                # kind=MAINTENANCE: an operator-initiated drain, allowed for non-interruptible jobs too
                commands.append(Drain(inst.id, reason=f"{self.reason}: checkpoint and leave",
                                      kind=NoticeKind.MAINTENANCE, deadline=snapshot.now + self.grace))  # fmt: skip
        return commands
