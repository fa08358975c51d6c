"""The policy seam: a policy reads a ``Snapshot`` and returns ``Command``s.

A policy never sleeps, never calls a cloud, never reads the wall clock
(``snapshot.now`` is the time) and never touches the store. The controller's
``plan()``, the simulator and the benchmarks all call ``decide`` the same way.
"""

from __future__ import annotations

from typing import Protocol

from spotfleet.model.snapshot import Command, Snapshot


class Policy(Protocol):
    name: str

    def decide(self, snapshot: Snapshot) -> list[Command]:
        """Commands to move the fleet toward what the backlog needs."""
        ...
