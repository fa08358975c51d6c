"""The provider Protocol: the only way spotfleet touches a cloud.

Six methods, each with a contract (after Karpenter's CloudProvider and Ray's
autoscaler v2 NodeProvider):

- ``offerings()``: what can be bought now, with prices. May be cached; each
  offering says where its price came from and how old it is.
- ``launch(request)``: buy ``request.count`` instances of ``request.offering``
  (or of an acceptable alternative). **Idempotent per request id**: calling it
  again with the same ``request_id`` returns the instances of the first call and
  buys nothing. Raises ``InsufficientCapacity`` naming exactly the offerings that
  had no capacity, ``QuotaExceeded``, ``Throttled`` or ``PermanentError``.
  Partial fulfilment returns fewer instances than asked for.
- ``terminate(ids, request_id=...)``: give instances back. Refuses (``NotOwned``)
  an instance without this cluster's ownership tag; an unknown id raises
  ``InstanceNotFound``; terminating an already-terminated instance is a no-op.
- ``list_instances()``: every instance carrying this cluster's ownership tag,
  terminated ones included while the cloud still reports them. **Eventually
  consistent**: a just-launched instance may be missing for a few seconds.
- ``get(id)``: one instance; ``InstanceNotFound`` if unknown.
- ``poll_events()``: interruption notices and state changes since the last call,
  possibly duplicated (callers de-duplicate), never blocking for long.

Ownership is expressed as tags: ``spotfleet:cluster``, ``spotfleet:request-id``,
``spotfleet:instance-id`` (the controller's own id). Adapters translate them to
the cloud's rules (GCP labels use ``spotfleet-cluster`` etc.).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.offering import Market, Offering, Offerings

TAG_CLUSTER = "spotfleet:cluster"
TAG_REQUEST_ID = "spotfleet:request-id"
TAG_INSTANCE_ID = "spotfleet:instance-id"
TAG_JOB_IDS = "spotfleet:job-ids"


class CloudState(enum.StrEnum):
    """An instance's state as the cloud reports it (normalized)."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    TERMINATED = "terminated"


@dataclass(frozen=True, slots=True)
class AgentBootstrap:
    """What a new instance needs to start its node agent and find the controller."""

    controller_url: str
    agent_token: str
    spotfleet_version: str
    cluster: str
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Buy ``count`` instances of ``offering`` (or one of ``alternatives``)."""

    request_id: str
    offering: Offering
    bootstrap: AgentBootstrap
    tags: Mapping[str, str]
    count: int = 1
    alternatives: tuple[Offering, ...] = ()
    placement_group: str | None = None

    @property
    def acceptable(self) -> tuple[Offering, ...]:
        return (self.offering, *self.alternatives)


@dataclass(frozen=True, slots=True)
class ProviderInstance:
    """An instance as the cloud sees it."""

    provider: str
    provider_id: str
    instance_type: str
    region: str
    zone: str
    market: Market
    state: CloudState
    tags: Mapping[str, str]
    launched_at: datetime | None = None
    address: str | None = None

    @property
    def request_id(self) -> str | None:
        return self.tags.get(TAG_REQUEST_ID)

    @property
    def spotfleet_id(self) -> str | None:
        return self.tags.get(TAG_INSTANCE_ID)


@runtime_checkable
class Provider(Protocol):
    """A cloud, as spotfleet sees it. See the module docstring for contracts."""

    name: str

    def offerings(self) -> Offerings: ...

    def launch(self, request: LaunchRequest) -> list[ProviderInstance]: ...

    def terminate(self, provider_ids: Sequence[str], *, request_id: str) -> None: ...

    def list_instances(self) -> list[ProviderInstance]: ...

    def get(self, provider_id: str) -> ProviderInstance: ...

    def poll_events(self) -> list[InstanceEvent]: ...


@runtime_checkable
class SupportsInterrupt(Protocol):
    """A provider that can announce a reclaim on demand (local, fake, sim):
    what ``spotfleet local interrupt`` and the demo use."""

    def interrupt(self, provider_id: str, *, kind: NoticeKind, notice: timedelta) -> datetime: ...
