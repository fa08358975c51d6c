"""A provider for unit tests: records calls, injects errors, preempts on demand.

After Karpenter's ``pkg/cloudprovider/fake``: everything happens in memory and
at once, every call is recorded in ``calls``, ``fail_next_launch`` injects the
next launch error, ``preempt()`` announces a reclaim through ``poll_events``.
Builders such as ``gpu_offering("p4d.24xlarge", gpus=8, spot=12.3)`` keep tests
short. It honours the Protocol's contracts (idempotent launch per request id,
ownership checks, ``InstanceNotFound``) so tests of the controller are honest.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from spotfleet.clock import Clock, FakeClock
from spotfleet.errors import InstanceNotFound, NotOwned, ProviderError
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.providers.base import TAG_CLUSTER, CloudState, LaunchRequest, ProviderInstance


def gpu_offering(
    instance_type: str = "p3.2xlarge",
    *,
    gpus: int = 1,
    gpu: str = "V100",
    gpu_memory_gib: float = 16,
    spot: float | None = 0.9,
    on_demand: float = 3.06,
    zone: str = "us-east-1a",
    region: str = "us-east-1",
    provider: str = "fake",
    market: Market | None = None,
    nvlink: bool = False,
) -> Offering:
    """One offering (spot if ``spot`` is given and ``market`` is not on-demand)."""
    mk = market or (Market.SPOT if spot is not None else Market.ON_DEMAND)
    price = on_demand if mk is Market.ON_DEMAND else float(spot or 0.0)
    return Offering(
        provider=provider, region=region, zone=zone, instance_type=instance_type, gpu=gpu, gpu_count=gpus,
        gpu_memory_gib=gpu_memory_gib, vcpus=8.0 * gpus, memory_gib=61.0 * gpus, market=mk, price_per_hour=price,
        on_demand_price_per_hour=on_demand, price_source="fake", nvlink=nvlink,
    )  # fmt: skip


def both_markets(instance_type: str = "p3.2xlarge", **kwargs: Any) -> list[Offering]:
    """The spot and on-demand offerings of one instance type."""
    return [gpu_offering(instance_type, market=Market.SPOT, **kwargs),
            gpu_offering(instance_type, market=Market.ON_DEMAND, **kwargs)]  # fmt: skip


@dataclass
class FakeProvider:
    offering_list: list[Offering] = field(default_factory=lambda: both_markets())
    clock: Clock = field(default_factory=FakeClock)
    cluster: str = "default"
    name: str = "fake"
    calls: list[tuple[str, Any]] = field(default_factory=list)
    instances: dict[str, ProviderInstance] = field(default_factory=dict)
    launch_errors: list[ProviderError] = field(default_factory=list)
    list_error: ProviderError | None = None
    _events: list[InstanceEvent] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def offerings(self) -> Offerings:
        self.calls.append(("offerings", None))
        return Offerings(replace(o, provider=self.name) for o in self.offering_list)

    def fail_next_launch(self, *errors: ProviderError) -> None:
        self.launch_errors.extend(errors)

    def launch(self, request: LaunchRequest) -> list[ProviderInstance]:
        self.calls.append(("launch", request))
        existing = [i for i in self.instances.values() if i.request_id == request.request_id]
        if existing:
            return existing
        if self.launch_errors:
            raise self.launch_errors.pop(0)
        made = []
        for _ in range(request.count):
            o = request.offering
            n = next(self._ids)
            pid = f"fake-{n:04d}"
            inst = ProviderInstance(
                provider=self.name, provider_id=pid, instance_type=o.instance_type, region=o.region, zone=o.zone,
                market=o.market, state=CloudState.RUNNING, tags=dict(request.tags), launched_at=self.clock.now(),
                address=f"10.0.{n // 256}.{n % 256}",  # a private address, as the clouds report one
            )  # fmt: skip
            self.instances[pid] = inst
            made.append(inst)
        return made

    def terminate(self, provider_ids: Sequence[str], *, request_id: str) -> None:
        self.calls.append(("terminate", tuple(provider_ids)))
        for pid in provider_ids:
            inst = self.get(pid)
            if inst.tags.get(TAG_CLUSTER) != self.cluster:
                raise NotOwned(pid)
            self.instances[pid] = replace(inst, state=CloudState.TERMINATED)

    def list_instances(self) -> list[ProviderInstance]:
        self.calls.append(("list_instances", None))
        if self.list_error is not None:
            raise self.list_error
        return [i for i in self.instances.values() if i.tags.get(TAG_CLUSTER) == self.cluster]

    def get(self, provider_id: str) -> ProviderInstance:
        try:
            return self.instances[provider_id]
        except KeyError:
            raise InstanceNotFound(provider_id) from None

    def poll_events(self) -> list[InstanceEvent]:
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------ test controls

    def interrupt(self, provider_id: str, *, kind: NoticeKind = NoticeKind.SPOT_INTERRUPTION,
                  notice: timedelta = timedelta(minutes=2)) -> datetime:  # fmt: skip
        """``SupportsInterrupt``: the same as ``preempt``."""
        return self.preempt(provider_id, notice=notice, kind=kind)

    def preempt(self, provider_id: str, *, notice: timedelta = timedelta(minutes=2),
                kind: NoticeKind = NoticeKind.SPOT_INTERRUPTION) -> datetime:  # fmt: skip
        """Announce a reclaim (the instance keeps running until ``reclaim``)."""
        now = self.clock.now()
        deadline = now + notice
        self._events.append(InstanceEvent(self.name, provider_id, kind, now, deadline, source="fake"))
        return deadline

    def reclaim(self, provider_id: str) -> None:
        """The cloud takes the instance back."""
        self.instances[provider_id] = replace(self.instances[provider_id], state=CloudState.TERMINATED)
        self._events.append(
            InstanceEvent(self.name, provider_id, NoticeKind.TERMINATED, self.clock.now(), source="fake")
        )

    def add_foreign(self, provider_id: str, *, tags: dict[str, str] | None = None) -> ProviderInstance:
        """An instance this cluster does not own (for ownership tests)."""
        o = self.offering_list[0]
        inst = ProviderInstance(self.name, provider_id, o.instance_type, o.region, o.zone, o.market,
                                CloudState.RUNNING, tags or {}, self.clock.now())  # fmt: skip
        self.instances[provider_id] = inst
        return inst

    def calls_named(self, name: str) -> list[Any]:
        return [arg for call, arg in self.calls if call == name]

    def running(self) -> list[ProviderInstance]:
        return [i for i in self.instances.values() if i.state is not CloudState.TERMINATED]
