"""Typed errors that carry their retry meaning.

Design choice: failures the planner must react to are types, never strings. A
provider raises ``InsufficientCapacity`` naming exactly the offerings that failed,
so the planner can mark those pools unavailable and try the next-best offering in
the same step; ``Throttled`` carries how long to back off; ``PermanentError`` means
"a human must fix something" and is never retried in a loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotfleet.model.offering import Offering


class SpotfleetError(Exception):
    """Base of every error spotfleet raises on purpose."""


class InvalidSpec(SpotfleetError):
    """A job spec or config failed validation.

    ``field`` is the dotted path of the offending field (``resources.gpus``) and
    ``message`` says what is wrong and how to fix it; ``str()`` gives one line.
    """

    def __init__(self, field: str, message: str, *, source: str | None = None) -> None:
        self.field = field
        self.message = message
        self.source = source
        prefix = f"{source}: " if source else ""
        where = f"{field}: " if field else ""
        super().__init__(f"{prefix}{where}{message}")


class IllegalTransition(SpotfleetError):
    """A state machine was asked for a move its transition table forbids."""


class NotFound(SpotfleetError):
    """A job or instance id the caller named does not exist."""


class ProviderError(SpotfleetError):
    """Base of errors a cloud provider adapter raises."""


class InsufficientCapacity(ProviderError):
    """The cloud has no capacity for these offerings right now (a stockout).

    Retry elsewhere, not here: the planner marks each offering unavailable for a
    few minutes (keyed by market, instance type and zone).
    """

    def __init__(self, offerings: Sequence[Offering], message: str = "") -> None:
        self.offerings = tuple(offerings)
        names = ", ".join(o.key for o in self.offerings) or "?"
        super().__init__(message or f"insufficient capacity for {names}")


class QuotaExceeded(ProviderError):
    """An account quota (vCPUs, GPUs, fleet count) blocks the launch.

    Retrying will not help until a quota is raised or capacity is released.
    """


class InstanceNotFound(ProviderError):
    """The provider does not know this instance id (never existed or long gone)."""

    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id
        super().__init__(f"instance not found: {instance_id}")


class NotOwned(ProviderError):
    """Refused: the instance exists but does not carry spotfleet's ownership tag."""

    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id
        super().__init__(f"refusing to touch {instance_id}: it does not carry this cluster's ownership tag")


class Throttled(ProviderError):
    """The cloud API rate-limited us; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: float = 5.0, message: str = "") -> None:
        self.retry_after = retry_after
        super().__init__(message or f"throttled; retry after {retry_after:.0f}s")


class PermanentError(ProviderError):
    """A failure that retrying cannot fix (bad credentials, invalid parameter).

    Surfaced to the operator as an event; the affected jobs stay pending.
    """
