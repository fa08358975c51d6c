"""Enforced state machines with a timestamped history.

Every lifecycle in spotfleet (jobs, instances) is an enum plus a transition table
``dict[State, frozenset[State]]`` with one comment per edge. ``StateMachine.move``
(what ``Job.transition`` and ``Instance.transition`` call) refuses any move the
table does not list (``IllegalTransition``) and appends a record to the entity's
history; stuck-state timeouts and ``spotfleet explain`` read it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from spotfleet.errors import IllegalTransition

S = TypeVar("S", bound=enum.Enum)


@dataclass(frozen=True, slots=True)
class TransitionRecord:
    """One move of a state machine: from where, to where, when and why."""

    from_state: str
    to_state: str
    at: datetime
    reason: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"from": self.from_state, "to": self.to_state, "at": self.at.isoformat(), "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, str]) -> TransitionRecord:
        return cls(data["from"], data["to"], datetime.fromisoformat(data["at"]), data.get("reason", ""))


class StateMachine(Generic[S]):
    """A transition table and the check that enforces it."""

    def __init__(self, name: str, transitions: Mapping[S, frozenset[S]], terminal: frozenset[S]) -> None:
        self.name = name
        self.transitions = dict(transitions)
        self.terminal = terminal
        for state, targets in self.transitions.items():
            if state in terminal and targets:
                raise ValueError(f"{name}: terminal state {state} has outgoing edges")

    def allowed(self, current: S, target: S) -> bool:
        return target in self.transitions.get(current, frozenset())

    def check(self, current: S, target: S, *, what: str) -> None:
        if not self.allowed(current, target):
            allowed = ", ".join(sorted(s.value for s in self.transitions.get(current, frozenset()))) or "none"
            raise IllegalTransition(
                f"{self.name} {what}: illegal transition {current.value} -> {target.value} (allowed from {current.value}: {allowed})"
            )

    def move(self, entity: Stateful[S], to: S, *, at: datetime, reason: str, what: str) -> bool:
        """Move ``entity`` to ``to`` (checked, recorded). False if it is already there."""
        if to is entity.state:
            return False
        self.check(entity.state, to, what=what)
        entity.history.append(TransitionRecord(entity.state.value, to.value, at, reason))
        entity.state = to
        entity.state_since = at
        if reason:
            entity.message = reason
        return True


class Stateful(Protocol[S]):
    """What ``StateMachine.move`` needs of an entity (a job or an instance)."""

    state: S
    state_since: datetime
    message: str
    history: list[TransitionRecord]
