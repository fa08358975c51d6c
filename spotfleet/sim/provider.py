"""A cloud replayed from spot traces, on a virtual clock.

``SimProvider`` implements the provider Protocol over a ``TraceSet`` (see
``spotfleet.sim.traces``) and a ``Clock`` the simulator moves (``FakeClock``).
Its semantics are the simulator's (docs/simulator.md):

- **Offerings.** Per traced zone: spot at the tick's trace price, marked
  ``available`` only while the zone has free capacity at this tick; on-demand at
  the trace's on-demand price, always available. Instance types the traces do
  not cover come from the bundled catalog (on-demand only by default: with no
  trace there is nothing honest to say about their spot capacity).
- **Launch.** Spot succeeds only at a tick where the zone has capacity for it:
  ``available − (spot instances already running there) ≥ count``; otherwise
  ``InsufficientCapacity`` naming exactly the offerings that had none. The
  first acceptable offering with capacity wins. Idempotent per request id.
- **Reclaim.** A running spot instance is reclaimed at the first tick boundary
  where its zone's capacity drops below what is running there (newest first).
  ``poll_events()`` announces it ``notice`` seconds before (AWS 120 s, GCP 30 s;
  at launch time if the instance is younger than that) as ``SPOT_INTERRUPTION``
  with the reclaim time as deadline, then reports ``TERMINATED`` when it happens.
- **Billing.** Per second from launch to termination: spot at each tick's trace
  price, on-demand at its price (``cost()``, ``bills()``).

Design choice — the provider has no ``tick()`` of its own: every call first
brings it up to ``clock.now()``, looking ``notice`` seconds ahead for reclaims,
so the simulator only moves the clock and the provider can never drift from it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np

from spotfleet.clock import Clock
from spotfleet.errors import InstanceNotFound, InsufficientCapacity, NotOwned, PermanentError
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.interconnect import interconnect_of
from spotfleet.model.notice import SPOT_NOTICE_SECONDS
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.providers.base import TAG_CLUSTER, CloudState, LaunchRequest, ProviderInstance
from spotfleet.sim.traces import TraceSet, ZoneTrace

NOTICE_SECONDS: Mapping[str, float] = SPOT_NOTICE_SECONDS
DEFAULT_NOTICE_SECONDS = 120.0
TERMINATED_RETENTION = timedelta(hours=1)  # terminated instances stay listed this long


@dataclass(slots=True)
class SimInstance:
    """One simulated instance and its bill."""

    provider_id: str
    offering: Offering
    tags: dict[str, str]
    request_id: str
    launched_at: datetime
    zone_key: str | None  # the trace it lives on; None for catalog offerings
    agent_token: str = ""  # what its node agent would present (the simulator plays the agent)
    ended_at: datetime | None = None
    reclaim_at: datetime | None = None  # decided reclaim (notice given or pending)
    reclaimed: bool = False
    notice_sent: bool = False

    def alive_at(self, when: datetime) -> bool:
        return self.launched_at <= when and (self.ended_at is None or when < self.ended_at)


@dataclass(frozen=True, slots=True)
class Bill:
    provider_id: str
    zone: str
    instance_type: str
    market: Market
    launched_at: datetime
    ended_at: datetime | None
    seconds: float
    cost: float
    reclaimed: bool


@dataclass(slots=True)
class _Zone:
    trace: ZoneTrace
    notice: timedelta
    cum_cost: np.ndarray  # cum_cost[k]: USD of one spot instance over ticks [0, k)
    running: list[SimInstance] = field(default_factory=list)  # spot, launch order
    scanned_to: int = 0  # boundaries < scanned_to are decided for ``running``


class SimProvider:
    """A provider replaying ``traces`` on ``clock``. See the module docstring."""

    def __init__(
        self,
        traces: TraceSet,
        *,
        clock: Clock,
        name: str = "sim",
        cluster: str = "default",
        clouds: Iterable[str] | None = None,
        catalog: Offerings | None = None,
        catalog_spot: bool = False,
        notice_seconds: Mapping[str, float] = NOTICE_SECONDS,
        boot_seconds: float = 0.0,
    ) -> None:
        """``clouds`` limits the traced zones to those clouds (one provider per
        cloud, named after it, lets job specs say ``providers: [gcp]``).
        ``catalog`` adds offerings for instance types no trace covers (default
        none); ``catalog_spot`` also offers their spot market, always available."""
        self.name = name
        self.clock = clock
        self.cluster = cluster
        self.traces = traces
        self.boot = timedelta(seconds=boot_seconds)
        wanted = set(clouds) if clouds is not None else None
        tick_h = traces.tick_seconds / 3600.0
        self._zones: dict[str, _Zone] = {}
        for trace in traces.zones:
            if wanted is not None and trace.cloud not in wanted:
                continue
            notice = timedelta(seconds=notice_seconds.get(trace.cloud, DEFAULT_NOTICE_SECONDS))
            cum = np.concatenate([[0.0], np.cumsum(trace.spot_price * tick_h)])
            self._zones[trace.key] = _Zone(trace, notice, cum)
        if not self._zones:
            raise PermanentError(f"no traced zone for provider {name!r}")
        self._lookahead = max(z.notice for z in self._zones.values())
        self._hardware = _hardware_table(catalog)
        self._extra = self._catalog_offerings(catalog, spot=catalog_spot)
        self._instances: dict[str, SimInstance] = {}
        self._by_request: dict[str, list[str]] = {}
        self._events: list[InstanceEvent] = []
        self._ids = itertools.count(1)
        self.launches = 0
        self.capacity_errors = 0
        self.reclaims = 0

    # ------------------------------------------------------------ Protocol

    def offerings(self) -> Offerings:
        now = self._advance()
        items = []
        for zone in self._zones.values():
            items.append(self._spot_offering(zone, now))
            items.append(self._on_demand_offering(zone))
        items.extend(self._extra)
        return Offerings(items)

    def launch(self, request: LaunchRequest) -> list[ProviderInstance]:
        now = self._advance()
        done = self._by_request.get(request.request_id)
        if done is not None:
            return [self._view(self._instances[pid], now) for pid in done]
        failed: list[Offering] = []
        for offering in request.acceptable:
            zone = self._zone_for(offering)
            if offering.provider != self.name or (zone is None and not self._is_extra(offering)):
                raise PermanentError(f"{self.name} does not sell {offering.key}")
            if zone is not None and offering.market is Market.SPOT and self._free(zone, now) < request.count:
                failed.append(offering)
                continue
            made = [self._start(offering, zone, request, now) for _ in range(request.count)]
            self._by_request[request.request_id] = [i.provider_id for i in made]
            self.launches += len(made)
            return [self._view(i, now) for i in made]
        self.capacity_errors += 1
        raise InsufficientCapacity(failed)

    def terminate(self, provider_ids: Sequence[str], *, request_id: str) -> None:
        now = self._advance()
        for pid in provider_ids:
            inst = self._get(pid)
            if inst.tags.get(TAG_CLUSTER) != self.cluster:
                raise NotOwned(pid)
        for pid in provider_ids:
            inst = self._instances[pid]
            if inst.ended_at is None:
                self._end(inst, now)

    def list_instances(self) -> list[ProviderInstance]:
        now = self._advance()
        return [
            self._view(i, now)
            for i in self._instances.values()
            if i.tags.get(TAG_CLUSTER) == self.cluster
            and (i.ended_at is None or now - i.ended_at <= TERMINATED_RETENTION)
        ]

    def get(self, provider_id: str) -> ProviderInstance:
        now = self._advance()
        return self._view(self._get(provider_id), now)

    def poll_events(self) -> list[InstanceEvent]:
        now = self._advance()
        due = [e for e in self._events if e.observed_at <= now]
        self._events = [e for e in self._events if e.observed_at > now]
        return due

    # ------------------------------------------------------------ accounting

    def cost(self, *, until: datetime | None = None) -> float:
        """USD spent on every instance up to ``until`` (default: now)."""
        return sum(b.cost for b in self.bills(until=until))

    def bills(self, *, until: datetime | None = None) -> list[Bill]:
        now = self._advance()
        end = until or now
        out = []
        for inst in self._instances.values():
            stop = min(inst.ended_at or end, end)
            seconds = max((stop - inst.launched_at).total_seconds(), 0.0)
            out.append(
                Bill(
                    provider_id=inst.provider_id,
                    zone=inst.offering.zone,
                    instance_type=inst.offering.instance_type,
                    market=inst.offering.market,
                    launched_at=inst.launched_at,
                    ended_at=inst.ended_at,
                    seconds=seconds,
                    cost=self._instance_cost(inst, stop),
                    reclaimed=inst.reclaimed,
                )
            )
        return out

    def live(self) -> list[SimInstance]:
        """Instances not yet terminated (the simulator runs their agents)."""
        now = self._advance()
        return [i for i in self._instances.values() if i.ended_at is None or i.ended_at > now]

    def instance(self, provider_id: str) -> SimInstance:
        self._advance()
        return self._get(provider_id)

    def capacity(self, zone: str, *, at: datetime | None = None) -> int:
        """Free spot capacity in a traced zone (name or key) at ``at`` (default now)."""
        now = self._advance()
        z = self._zone_named(zone)
        return self._free(z, at or now)

    def next_event_at(self, *, within: timedelta = timedelta(days=30)) -> datetime | None:
        """The next moment this provider will have news: a reclaim notice becoming
        due, a reclaim, or a queued event. The simulator wakes the controller then,
        so a 120 s notice is seen within the notice even with 195 s ticks."""
        now = self._advance()
        times = [e.observed_at for e in self._events if e.observed_at > now]
        limit = self.traces.tick_at(now + within)
        for zone in self._zones.values():
            times.extend(i.reclaim_at for i in zone.running if i.reclaim_at is not None and i.reclaim_at > now)
            undecided = [i for i in zone.running if i.reclaim_at is None]
            if not undecided:
                continue
            drop = self._next_drop(zone, start=max(zone.scanned_to, 0), count=len(zone.running), limit=limit)
            if drop is not None:
                times.append(max(self.traces.time_of(drop) - zone.notice, now))
        return min(times) if times else None

    # ------------------------------------------------------------ internals

    def _advance(self) -> datetime:
        """Bring every zone up to now: decide reclaims within the notice horizon,
        queue their notices, and end instances whose reclaim time has come."""
        now = self.clock.now()
        for zone in self._zones.values():
            if not zone.running:
                continue
            horizon = self.traces.tick_at(now + zone.notice)
            while zone.scanned_to <= horizon:
                self._decide_boundary(zone, zone.scanned_to)
                zone.scanned_to += 1
            for inst in list(zone.running):
                if inst.reclaim_at is not None and inst.reclaim_at <= now:
                    self._end(inst, inst.reclaim_at, reclaimed=True)
        return now

    def _decide_boundary(self, zone: _Zone, tick: int) -> None:
        """At the start of ``tick``, reclaim (newest first) what exceeds capacity."""
        at = self.traces.time_of(tick)
        alive = [i for i in zone.running if i.launched_at < at and (i.reclaim_at is None or i.reclaim_at > at)]
        excess = len(alive) - self._available(zone, tick)
        for inst in sorted(alive, key=lambda i: (i.launched_at, i.provider_id), reverse=True)[: max(excess, 0)]:
            self._doom(zone, inst, at)

    def _doom(self, zone: _Zone, inst: SimInstance, at: datetime) -> None:
        inst.reclaim_at = at
        observed = max(at - zone.notice, inst.launched_at)
        self._events.append(
            InstanceEvent(
                provider=self.name,
                provider_instance_id=inst.provider_id,
                kind=NoticeKind.SPOT_INTERRUPTION,
                observed_at=observed,
                deadline=at,
                source="sim",
                detail=f"capacity in {zone.trace.zone} drops at {at.isoformat()}",
            )
        )
        inst.notice_sent = True

    def _end(self, inst: SimInstance, at: datetime, *, reclaimed: bool = False) -> None:
        inst.ended_at = at
        inst.reclaimed = reclaimed
        if inst.zone_key is not None and inst.offering.market is Market.SPOT:
            self._zones[inst.zone_key].running.remove(inst)
        if reclaimed:
            self.reclaims += 1
            self._events.append(
                InstanceEvent(
                    provider=self.name,
                    provider_instance_id=inst.provider_id,
                    kind=NoticeKind.TERMINATED,
                    observed_at=at,
                    source="sim",
                    detail="reclaimed: spot capacity dropped",
                )
            )

    def _start(self, offering: Offering, zone: _Zone | None, request: LaunchRequest, now: datetime) -> SimInstance:
        pid = f"{self.name}-{next(self._ids):06d}"
        inst = SimInstance(
            provider_id=pid,
            offering=offering,
            tags=dict(request.tags),
            request_id=request.request_id,
            launched_at=now,
            zone_key=zone.trace.key if zone is not None else None,
            agent_token=request.bootstrap.agent_token,
        )
        self._instances[pid] = inst
        if zone is not None and offering.market is Market.SPOT:
            if not zone.running:
                zone.scanned_to = self.traces.tick_at(now) + 1
            zone.running.append(inst)
            # Boundaries already decided ahead of now must count the newcomer too
            # (it is the newest, so it is the first to go if capacity is short).
            for tick in range(self.traces.tick_at(now) + 1, zone.scanned_to):
                at = self.traces.time_of(tick)
                alive = [i for i in zone.running if i.reclaim_at is None or i.reclaim_at > at]
                if len(alive) > self._available(zone, tick):
                    self._doom(zone, inst, at)
                    break
        return inst

    def _next_drop(self, zone: _Zone, *, start: int, count: int, limit: int) -> int | None:
        """The first tick ≥ ``start`` (and ≤ ``limit``) whose capacity is below ``count``."""
        n = self.traces.n_ticks
        if start >= n:
            return start  # past the traces: no capacity at all
        stop = min(limit + 1, n)
        if stop > start:
            short = np.flatnonzero(zone.trace.available[start:stop] < count)
            if short.size:
                return start + int(short[0])
        return n if stop >= n else None

    def _available(self, zone: _Zone, tick: int) -> int:
        if 0 <= tick < self.traces.n_ticks:
            return int(zone.trace.available[tick])
        return 0

    def _free(self, zone: _Zone, when: datetime) -> int:
        occupied = sum(1 for i in zone.running if i.alive_at(when))
        return self._available(zone, self.traces.tick_at(when)) - occupied

    def _instance_cost(self, inst: SimInstance, stop: datetime) -> float:
        seconds = max((stop - inst.launched_at).total_seconds(), 0.0)
        if inst.zone_key is None:
            return inst.offering.price_per_hour * seconds / 3600.0
        zone = self._zones[inst.zone_key]
        if inst.offering.market is Market.ON_DEMAND:
            return zone.trace.on_demand_price * seconds / 3600.0
        return self._spot_integral(zone, inst.launched_at, stop)

    def _spot_integral(self, zone: _Zone, start: datetime, stop: datetime) -> float:
        """USD of one spot instance over [start, stop): per second at each tick's price."""
        tick_s = self.traces.tick_seconds
        a = (start - self.traces.epoch).total_seconds() / tick_s
        b = (stop - self.traces.epoch).total_seconds() / tick_s
        if b <= a:
            return 0.0
        return self._cum_at(zone, b) - self._cum_at(zone, a)

    def _cum_at(self, zone: _Zone, x: float) -> float:
        """Integral of the price from tick 0 to fractional tick ``x`` (prices
        outside the trace extend its first/last tick)."""
        n = self.traces.n_ticks
        tick_h = self.traces.tick_seconds / 3600.0
        prices = zone.trace.spot_price
        if x <= 0:
            return float(prices[0] * x * tick_h)
        if x >= n:
            return float(zone.cum_cost[n] + prices[n - 1] * (x - n) * tick_h)
        k = math.floor(x)
        return float(zone.cum_cost[k] + prices[k] * (x - k) * tick_h)

    def _spot_offering(self, zone: _Zone, now: datetime) -> Offering:
        tick = min(max(self.traces.tick_at(now), 0), self.traces.n_ticks - 1)
        price = float(zone.trace.spot_price[tick])
        base = self._base_offering(zone.trace, Market.SPOT, price)
        return replace(base, available=self._free(zone, now) >= 1, price_observed_at=now)

    def _on_demand_offering(self, zone: _Zone) -> Offering:
        return self._base_offering(zone.trace, Market.ON_DEMAND, zone.trace.on_demand_price)

    def _base_offering(self, trace: ZoneTrace, market: Market, price: float) -> Offering:
        gpu_mem, vcpus, mem, nvlink = self._hardware.get(trace.instance_type, (0.0, 0.0, 0.0, False))
        return Offering(
            provider=self.name,
            region=trace.region,
            zone=trace.zone,
            instance_type=trace.instance_type,
            gpu=trace.gpu,
            gpu_count=trace.gpus_per_instance,
            gpu_memory_gib=gpu_mem,
            vcpus=vcpus,
            memory_gib=mem,
            market=market,
            price_per_hour=price,
            on_demand_price_per_hour=trace.on_demand_price,
            price_source="trace",
            nvlink=nvlink,
            interconnect=interconnect_of(trace.instance_type).value,
            extra=(("cloud", trace.cloud), ("trace", trace.name)),
        )

    def _catalog_offerings(self, catalog: Offerings | None, *, spot: bool) -> tuple[Offering, ...]:
        if catalog is None:
            return ()
        traced = {(z.trace.cloud, z.trace.instance_type) for z in self._zones.values()}
        clouds = {z.trace.cloud for z in self._zones.values()}
        return tuple(
            replace(o, provider=self.name, extra=(("cloud", o.provider),))
            for o in catalog
            if o.provider in clouds
            and (o.provider, o.instance_type) not in traced
            and (spot or o.market is Market.ON_DEMAND)
        )

    def _is_extra(self, offering: Offering) -> bool:
        return any(o.key == offering.key for o in self._extra)

    def _zone_for(self, offering: Offering) -> _Zone | None:
        for zone in self._zones.values():
            if zone.trace.zone == offering.zone and zone.trace.instance_type == offering.instance_type:
                return zone
        return None

    def _zone_named(self, name: str) -> _Zone:
        for key, zone in self._zones.items():
            if name in (key, zone.trace.zone):
                return zone
        raise KeyError(f"no traced zone {name!r}")

    def _get(self, provider_id: str) -> SimInstance:
        try:
            return self._instances[provider_id]
        except KeyError:
            raise InstanceNotFound(provider_id) from None

    def _view(self, inst: SimInstance, now: datetime) -> ProviderInstance:
        if inst.ended_at is not None and inst.ended_at <= now:
            state = CloudState.TERMINATED
        elif now < inst.launched_at + self.boot:
            state = CloudState.PENDING
        else:
            state = CloudState.RUNNING
        o = inst.offering
        return ProviderInstance(
            provider=self.name,
            provider_id=inst.provider_id,
            instance_type=o.instance_type,
            region=o.region,
            zone=o.zone,
            market=o.market,
            state=state,
            tags=dict(inst.tags),
            launched_at=inst.launched_at,
        )


def _hardware_table(catalog: Offerings | None) -> dict[str, tuple[float, float, float, bool]]:
    """GPU memory, vCPUs, memory and NVLink per instance type, from the catalog."""
    if catalog is None:
        from spotfleet.catalog import load_catalog

        catalog = load_catalog()
    table: dict[str, tuple[float, float, float, bool]] = {}
    for o in catalog:
        table.setdefault(o.instance_type, (o.gpu_memory_gib, o.vcpus, o.memory_gib, o.nvlink))
    return table
