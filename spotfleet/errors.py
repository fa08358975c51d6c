"""Typed errors that carry their retry meaning.

Design choice: failures the planner must react to are types, never strings. A
provider raises ``InsufficientCapacity`` naming exactly the offerings that failed,
so the planner can mark those pools unavailable and try the next-best offering in
the same step; ``Throttled`` carries how long to back off; ``PermanentError`` means
"a human must fix something" and is never retried in a loop.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotfleet.model.offering import Offering


class SpotfleetError(Exception):
    """Base of every error spotfleet raises on purpose."""


class InvalidSpec(SpotfleetError):
    """A job spec or config failed validation.

    ``field`` is the dotted path of the offending field (``resources.gpus``) and
    ``message`` says what is wrong and how to fix it. When several fields are
    wrong, ``issues`` holds every ``(field, message)`` pair (the first is
    ``field``/``message``) and ``str()`` gives one line per issue, so a user fixes
    them all in one go.
    """

    def __init__(
        self,
        field: str,
        message: str,
        *,
        source: str | None = None,
        issues: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        self.field = field
        self.message = message
        self.source = source
        self.issues: tuple[tuple[str, str], ...] = tuple(issues) if issues else ((field, message),)
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        prefix = f"{self.source}: " if self.source else ""
        return [f"{prefix}{f}: {m}" if f else f"{prefix}{m}" for f, m in self.issues]

    def with_source(self, source: str | None) -> InvalidSpec:
        return type(self)(self.field, self.message, source=source, issues=self.issues)


class MissingExtra(SpotfleetError):
    """A feature needs an optional dependency that is not installed.

    spotfleet's core is what a node agent and a local controller need; the cloud
    SDKs, the simulator's numpy, plotting and PostgreSQL are extras.
    """

    def __init__(self, extra: str, feature: str, module: str | None = None) -> None:
        self.extra = extra
        self.feature = feature
        missing = f" ({module} is not installed)" if module else ""
        super().__init__(f"{feature} needs the '{extra}' extra{missing}: pip install 'spotfleet[{extra}]'")


class StoreUnavailable(SpotfleetError):
    """The database could not be reached (or refused us)."""


class PortInUse(SpotfleetError):
    """The API's address is taken (another controller, or another program)."""


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


class QuotaScope(enum.StrEnum):
    """What a quota covers: every launch of the provider, one region, or one instance family."""

    GLOBAL = "global"
    REGION = "region"
    FAMILY = "family"


def instance_family(instance_type: str) -> str:
    """``p3.2xlarge`` → ``p3``; ``a2-highgpu-1g`` → ``a2`` (what a family quota covers)."""
    return instance_type.split(".")[0].split("-")[0]


class QuotaExceeded(ProviderError):
    """An account quota (vCPUs, GPUs, fleet count) blocks the launch.

    Retrying will not help until a quota is raised or capacity is released,
    and neither will another offering in the same ``scope``: the planner waits
    (every offering of the scope is marked unavailable) instead of climbing to
    bigger or pricier ones. ``region``/``family`` name the scope when the
    adapter knows it; otherwise the failed launch's offering does.
    """

    def __init__(
        self,
        message: str = "",
        *,
        scope: QuotaScope = QuotaScope.REGION,
        region: str | None = None,
        family: str | None = None,
    ) -> None:
        self.scope = QuotaScope(scope)
        self.region = region
        self.family = family
        super().__init__(message or f"quota exceeded ({self.scope.value})")

    def covers(self, offering: Offering, *, failed: Offering) -> bool:
        """Does this quota block ``offering`` too (``failed``: the launch that hit it)?"""
        if offering.provider != failed.provider:
            return False
        if self.scope is QuotaScope.GLOBAL:
            return True
        if self.scope is QuotaScope.REGION:
            return offering.region == (self.region or failed.region)
        family = self.family or instance_family(failed.instance_type)
        return instance_family(offering.instance_type) == family and offering.region == (self.region or failed.region)


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


class MissingCredentials(PermanentError):
    """No cloud credentials were found (or they were refused) for a provider."""


class ControllerLocked(SpotfleetError):
    """Another controller already runs on this SQLite database or data dir
    (SQLite is single-controller; replicate on PostgreSQL)."""


class Fenced(SpotfleetError):
    """This replica lost the leader lease (its epoch is stale): it must not
    write a step's decisions or call a cloud."""
