"""Offerings: what can be bought, as frozen data with chainable filters.

An ``Offering`` is one purchasable pool: (provider, market, instance type, zone)
with its price. ``Offerings`` is an immutable sequence whose filters return new
``Offerings`` so a policy reads like a sentence::

    offerings.available().market(Market.SPOT).compatible(req).cheapest()

``Offering.rejection(req)`` returns *why* an offering does not fit a job (or
``None``); ``spotfleet explain`` prints those reasons verbatim.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, overload


class Market(enum.StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on_demand"


@dataclass(frozen=True, slots=True)
class NodeRequirements:
    """What one node of a job needs; derived from a ``JobSpec``."""

    gpus: int = 1
    gpu_types: frozenset[str] = frozenset()
    gpu_memory_gib: float = 0.0
    cpus: float = 0.0
    memory_gib: float = 0.0
    regions: frozenset[str] = frozenset()
    providers: frozenset[str] = frozenset()
    max_price_per_hour: float | None = None
    nvlink: bool = False
    interconnect: str | None = None  # spotfleet.model.interconnect: required between nodes


@dataclass(frozen=True, slots=True)
class Offering:
    """One purchasable pool of capacity at a price (USD per instance-hour)."""

    provider: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpu_count: int
    gpu_memory_gib: float
    vcpus: float
    memory_gib: float
    market: Market
    price_per_hour: float
    on_demand_price_per_hour: float
    price_source: str = "catalog"
    price_observed_at: datetime | None = None
    available: bool = True
    nvlink: bool = False
    interconnect: str = "tcp"  # spotfleet.model.interconnect.Interconnect value
    extra: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # GPU partitioning (spotfleet.model.partition), set by the controller from its config and
    # from what agents reported: the declared MIG layout of each GPU, and why MIG profiles
    # ("*": all of them) cannot be had on this instance type.
    mig_layout: tuple[str, ...] = field(default=(), compare=False)
    mig_unfit: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def key(self) -> str:
        """Stable id of the pool: provider:market:instance_type:zone."""
        return f"{self.provider}:{self.market.value}:{self.instance_type}:{self.zone}"

    @property
    def pool(self) -> tuple[str, str, str, str]:
        return (self.provider, self.market.value, self.instance_type, self.zone)

    @property
    def price_per_gpu_hour(self) -> float:
        return self.price_per_hour / self.gpu_count if self.gpu_count else self.price_per_hour

    def with_price(self, price: float, *, source: str, observed_at: datetime | None) -> Offering:
        return replace(self, price_per_hour=price, price_source=source, price_observed_at=observed_at)

    def mig_unfit_reason(self, profile: str) -> str | None:
        """Why agents said ``profile`` cannot be had here (``None``: no report against it)."""
        for key, reason in self.mig_unfit:
            if key in ("*", profile):
                return reason
        return None

    def rejection(self, req: NodeRequirements) -> str | None:
        """Why this offering cannot host one node of ``req``; ``None`` if it can."""
        if req.providers and self.provider not in req.providers:
            return f"provider {self.provider} not in {sorted(req.providers)}"
        if req.regions and self.region not in req.regions:
            return f"region {self.region} not in allowed regions {sorted(req.regions)}"
        if self.gpu_count < req.gpus:
            return f"{self.gpu_count} GPUs < {req.gpus} needed per node"
        if req.gpu_types and self.gpu.upper() not in {t.upper() for t in req.gpu_types}:
            return f"GPU {self.gpu} not in {sorted(req.gpu_types)}"
        if req.gpus and self.gpu_memory_gib < req.gpu_memory_gib:
            return f"{self.gpu_memory_gib:g} GiB per GPU < {req.gpu_memory_gib:g} GiB needed"
        if self.vcpus < req.cpus:
            return f"{self.vcpus:g} vCPUs < {req.cpus:g} needed"
        if self.memory_gib < req.memory_gib:
            return f"{self.memory_gib:g} GiB memory < {req.memory_gib:g} GiB needed"
        if req.nvlink and req.gpus > 1 and not self.nvlink:
            return "no NVLink between GPUs (multi-GPU job asks for NVLink)"
        if req.interconnect and req.interconnect != "tcp" and self.interconnect != req.interconnect:
            return f"interconnect {self.interconnect}, job needs {req.interconnect}"
        if req.max_price_per_hour is not None and self.price_per_hour > req.max_price_per_hour:
            return f"${self.price_per_hour:.2f}/h > max price ${req.max_price_per_hour:.2f}/h"
        return None

    def fits(self, req: NodeRequirements) -> bool:
        return self.rejection(req) is None


class Offerings(Sequence[Offering]):
    """An immutable, chainable collection of offerings."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[Offering] = ()) -> None:
        self._items: tuple[Offering, ...] = tuple(items)

    @overload
    def __getitem__(self, index: int) -> Offering: ...
    @overload
    def __getitem__(self, index: slice) -> Offerings: ...
    def __getitem__(self, index: int | slice) -> Offering | Offerings:
        if isinstance(index, slice):
            return Offerings(self._items[index])
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Offering]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"Offerings({len(self._items)})"

    def where(self, predicate: Callable[[Offering], bool]) -> Offerings:
        return Offerings(o for o in self._items if predicate(o))

    def available(self) -> Offerings:
        return self.where(lambda o: o.available)

    def market(self, market: Market) -> Offerings:
        return self.where(lambda o: o.market is market)

    def spot(self) -> Offerings:
        return self.market(Market.SPOT)

    def on_demand(self) -> Offerings:
        return self.market(Market.ON_DEMAND)

    def provider(self, name: str) -> Offerings:
        return self.where(lambda o: o.provider == name)

    def compatible(self, req: NodeRequirements) -> Offerings:
        return self.where(lambda o: o.fits(req))

    def excluding(self, keys: Iterable[str]) -> Offerings:
        banned = set(keys)
        return self.where(lambda o: o.key not in banned)

    def sorted_by(self, key: Callable[[Offering], Any]) -> Offerings:
        return Offerings(sorted(self._items, key=key))

    def by_price(self) -> Offerings:
        return self.sorted_by(lambda o: (o.price_per_hour, o.key))

    def cheapest(self) -> Offering | None:
        return min(self._items, key=lambda o: (o.price_per_hour, o.key), default=None)

    def find(self, key: str) -> Offering | None:
        return next((o for o in self._items if o.key == key), None)

    def instance_types(self) -> list[str]:
        return sorted({o.instance_type for o in self._items})
