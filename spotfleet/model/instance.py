"""An instance's lifecycle: an enforced state machine with history.

::

    REQUESTED ──provider accepted──▶ PROVISIONING ──agent registered──▶ RUNNING
        │                               │                                  │
        └─launch failed─▶ FAILED        ├──notice──▶ DRAINING ◀──notice────┤
                                        ▼               │                  ▼
                                    TERMINATING ◀───────┴────idle / drained┘
                                        │
                                        ▼
                                    TERMINATED  (also straight from any live state
                                                 when the cloud reclaims it)

``REQUESTED`` is written *before* the cloud is called, with the launch's request
id: a controller that crashes between "decided" and "recorded" finds the request
on restart and adopts the instance the cloud made for it (matched by its
request-id tag) instead of launching twice.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from spotfleet.model.events import NoticeKind
from spotfleet.model.offering import Market, Offering
from spotfleet.model.statemachine import StateMachine, TransitionRecord


class InstanceState(enum.StrEnum):
    REQUESTED = "requested"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    DRAINING = "draining"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"


I = InstanceState  # noqa: E741
INSTANCE_TRANSITIONS: dict[InstanceState, frozenset[InstanceState]] = {
    I.REQUESTED: frozenset(
        {
            I.PROVISIONING,  # the provider accepted the launch and returned an id
            I.FAILED,  # the launch failed (capacity, quota, permanent error)
            I.TERMINATED,  # abandoned request found terminated on restart
        }
    ),
    I.PROVISIONING: frozenset(
        {
            I.RUNNING,  # the node agent registered
            I.DRAINING,  # a notice before the agent came up
            I.TERMINATING,  # never came up in time / no longer needed
            I.TERMINATED,  # the provider reports it gone (reclaimed, failed boot)
        }
    ),
    I.RUNNING: frozenset(
        {
            I.DRAINING,  # interruption notice, rebalance, or consolidation
            I.TERMINATING,  # idle past the TTL, or an operator asked
            I.TERMINATED,  # vanished without a notice (reclaim we missed, crash)
        }
    ),
    I.DRAINING: frozenset(
        {
            I.TERMINATING,  # every job checkpointed/left; give it back
            I.TERMINATED,  # reclaimed by the cloud at the notice deadline
        }
    ),
    I.TERMINATING: frozenset(
        {
            I.TERMINATED,  # the provider confirmed it gone
        }
    ),
    I.TERMINATED: frozenset(),
    I.FAILED: frozenset(),
}
TERMINAL_INSTANCE_STATES = frozenset({I.TERMINATED, I.FAILED})
LIVE_INSTANCE_STATES = frozenset({I.REQUESTED, I.PROVISIONING, I.RUNNING, I.DRAINING, I.TERMINATING})

INSTANCE_MACHINE: StateMachine[InstanceState] = StateMachine("instance", INSTANCE_TRANSITIONS, TERMINAL_INSTANCE_STATES)


@dataclass(slots=True)
class Instance:
    """A machine spotfleet bought (or is buying)."""

    id: str  # spotfleet's own id, known before the cloud answers
    offering: Offering
    request_id: str  # idempotency token of the launch
    state: InstanceState
    created_at: datetime
    state_since: datetime
    provider_id: str | None = None  # the cloud's id once it answers
    launched_at: datetime | None = None
    terminated_at: datetime | None = None
    idle_since: datetime | None = None  # since when no job has been bound here
    launch_attempts: int = 0
    address: str | None = None
    cordoned: bool = False  # no new placements
    reserved_for: str | None = (
        None  # replacement bought for this job ahead of a reclaim, or drained to free budget for it
    )
    notice_kind: NoticeKind | None = None
    notice_deadline: datetime | None = None
    message: str = ""
    history: list[TransitionRecord] = field(default_factory=list)
    version: int = 0

    @property
    def provider(self) -> str:
        return self.offering.provider

    @property
    def market(self) -> Market:
        return self.offering.market

    @property
    def gpu_count(self) -> int:
        return self.offering.gpu_count

    @property
    def live(self) -> bool:
        return self.state in LIVE_INSTANCE_STATES

    @property
    def schedulable(self) -> bool:
        """May new jobs be placed here?"""
        return self.state in (I.REQUESTED, I.PROVISIONING, I.RUNNING) and not self.cordoned

    def transition(self, to: InstanceState, *, at: datetime, reason: str = "") -> None:
        """Move to ``to`` or raise ``IllegalTransition``; records history."""
        if not INSTANCE_MACHINE.move(self, to, at=at, reason=reason, what=self.id):
            return
        if to in TERMINAL_INSTANCE_STATES and self.terminated_at is None:
            self.terminated_at = at
