"""Placement: fill existing capacity best-fit, then buy the cheapest instances.

Jobs are planned in groups of identical demand (same ``Shape``, markets and
economics of their spec), highest priority first. For each group:

1. *existing capacity* — every schedulable instance the shape and markets
   accept, in best-fit order (fewest free GPUs that still fit, then least GPU
   memory, then host memory), kept in a heap so filling a group of ``m`` jobs
   over ``c`` candidates costs ``O((m + c) log c)``;
2. *new capacity* — the offering with the lowest expected cost per unit of
   work for the jobs still waiting (``selection.OfferingIndex.ranked`` with the
   group size, so eight 1-GPU jobs may share one 8-GPU box when that is
   cheaper per unit of work), launched one instance at a time while the
   budget allows; the room a launch leaves is offered to later groups. Jobs
   resuming a checkpoint that costs egress to move carry their own economics
   and buy apart from the rest of their group.

Gang jobs (``nodes > 1``) are placed all nodes or none, on distinct instances
in one zone: either existing instances of a single zone, or ``nodes`` new
instances of one offering sharing a placement group (``pg-<job>``).

Jobs that are DRAINING need replacement capacity before they come back:
their demand reserves room (or buys it) without a Bind, so they resume as
soon as they checkpoint.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Binding, Job, JobState
from spotfleet.model.offering import Market, Offering
from spotfleet.model.snapshot import Bind, Launch
from spotfleet.policies.capacity import Cap
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import BudgetLedger
from spotfleet.policies.selection import Economics, OfferingIndex, RankTable
from spotfleet.policies.shape import Shape


@dataclass(slots=True)
class Demand:
    """One job to place (or, ``virtual``, to reserve replacement room for)."""

    job: Job
    shape: Shape
    markets: tuple[Market, ...]
    econ: Economics
    urgent: bool = False
    virtual: bool = False
    market_reason: str = ""

    @property
    def tenant(self) -> str:
        return self.job.spec.tenant


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the plan did for one job; ``explain`` shows it."""

    status: str  # bound | reserved | blocked
    code: str  # ok | budget | no_offering | no_room
    reason: str
    instance_ids: tuple[str, ...] = ()


class Fleet:
    """Every live instance's ``Cap``; schedulable ones indexed by pool."""

    def __init__(self) -> None:
        self.caps: dict[str, Cap] = {}
        self.pools: dict[str, list[Cap]] = {}
        self._added: list[Cap] = []  # schedulable caps in the order they were added
        self._cands: dict[tuple[Shape, tuple[Market, ...]], tuple[int, dict[str, bool], list[Cap]]] = {}
        self.reserved: dict[str, list[Cap]] = {}  # job id -> instances bought for it ahead of a reclaim

    @classmethod
    def build(cls, instances: Iterable[Instance], jobs: dict[str, Job]) -> Fleet:
        """Caps for every live instance, with the room the snapshot's jobs use.

        An instance bought as a replacement (``reserved_for``) is held for that
        job — kept out of everyone else's candidates — until the job is bound
        to it or is gone.
        """
        fleet = cls()
        for inst in instances:
            if not inst.live:
                continue
            cap = Cap(inst.id, inst.offering, schedulable=inst.schedulable)
            cap.drainable = inst.state in (InstanceState.PROVISIONING, InstanceState.RUNNING)
            owner = jobs.get(inst.reserved_for) if inst.reserved_for else None
            if owner is not None and not owner.terminal and inst.id not in owner.instance_ids:
                cap.reserved_for = owner.id
            fleet.add(cap)
        for job in jobs.values():
            if job.state not in (JobState.BOUND, JobState.RUNNING, JobState.DRAINING):
                continue
            for b in job.bindings:
                held = fleet.caps.get(b.instance_id)
                if held is not None:
                    held.occupy(job, b)
        return fleet

    def add(self, cap: Cap) -> None:
        self.caps[cap.id] = cap
        if cap.reserved_for is not None:
            if cap.schedulable:
                self.reserved.setdefault(cap.reserved_for, []).append(cap)
        elif cap.schedulable:
            self.pools.setdefault(cap.pool, []).append(cap)
            self._added.append(cap)

    def candidates(self, shape: Shape, markets: tuple[Market, ...], index: OfferingIndex) -> list[Cap]:
        """Schedulable instances the shape and markets accept that have room.

        Design choice: during a plan an instance's room only shrinks, so the
        candidate list of a (shape, markets) is cached and only re-filtered;
        instances launched since the last call are appended. Ten groups of
        the same shape then cost one scan of the fleet, not ten.
        """
        ckey = (shape, markets)
        seen, accepted, caps = self._cands.get(ckey, (0, {}, []))
        for cap in self._added[seen:]:
            ok = accepted.get(cap.pool)
            if ok is None:
                ok = accepted[cap.pool] = index.accepts(shape, cap.offering, markets)
            if ok:
                caps.append(cap)
        caps = [c for c in caps if c.fits(shape)]
        self._cands[ckey] = (len(self._added), accepted, caps)
        return caps


def tenant_cost(cap: Cap, shape: Shape, tenant: str) -> float:
    """USD/h a tenant is charged for one node on ``cap`` (0 on its own new box)."""
    if cap.new and cap.tenant == tenant:
        return 0.0
    o = cap.offering
    if o.gpu_count and shape.gpu_units > 0:
        return o.price_per_hour * shape.gpu_units / o.gpu_count
    return o.price_per_hour * (shape.req.cpus / o.vcpus if o.vcpus else 0.0)


@dataclass(slots=True)
class Placer:
    fleet: Fleet
    index: OfferingIndex
    ledger: BudgetLedger
    knobs: Knobs
    new_id: Callable[[], str]
    launches: list[Launch] = field(default_factory=list)
    binds: list[Bind] = field(default_factory=list)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    blocked: list[Demand] = field(default_factory=list)
    avoid: dict[str, frozenset[str]] = field(default_factory=dict)  # job → instances it must not go back to

    # ------------------------------------------------------------ results
    def _bound(self, d: Demand, bindings: tuple[Binding, ...], reason: str) -> None:
        ids = tuple(b.instance_id for b in bindings)
        if d.virtual:
            self.outcomes[d.job.id] = Outcome("reserved", "ok", f"replacement room reserved: {reason}", ids)
        else:
            self.binds.append(Bind(d.job.id, bindings, reason))
            self.outcomes[d.job.id] = Outcome("bound", "ok", reason, ids)

    def _block(self, d: Demand, code: str, reason: str) -> None:
        self.outcomes[d.job.id] = Outcome("blocked", code, reason)
        self.blocked.append(d)

    # ------------------------------------------------------------ groups
    def place_group(self, group: list[Demand]) -> None:
        if self.fleet.reserved:
            group = [d for d in group if not self._place_reserved(d)]
            if not group:
                return
        head = group[0]
        if head.shape.nodes > 1:
            by_zone: dict[str, list[Cap]] = {}
            for cap in self.fleet.candidates(head.shape, head.markets, self.index):
                by_zone.setdefault(cap.zone, []).append(cap)
            for d in group:
                self._place_gang(d, by_zone)
            return
        rest = self._fill_existing(group)
        if rest:
            self._buy(rest)

    def _place_reserved(self, d: Demand) -> bool:
        """Use (or, for a job still draining, hold) capacity bought for this job."""
        caps = [c for c in self.fleet.reserved.get(d.job.id, ()) if c.fits(d.shape)]
        if len(caps) < d.shape.nodes:
            return False
        caps.sort(key=lambda c: c.id)
        chosen = caps[: d.shape.nodes]
        bindings = tuple(c.take(d.shape, rank) for rank, c in enumerate(chosen))
        self._bound(d, bindings, "on the replacement bought for it ahead of a reclaim")
        return True

    def _fill_existing(self, group: list[Demand]) -> list[Demand]:
        shape, markets = group[0].shape, group[0].markets
        cands = self.fleet.candidates(shape, markets, self.index)
        heap = [(c.key(shape), i, c) for i, c in enumerate(cands)]
        heapq.heapify(heap)
        rest: list[Demand] = []
        for d in group:
            placed = False
            skipped: list[tuple[tuple[int, int, float, float, str], int, Cap]] = []
            while heap:
                item = heap[0]
                cap = item[2]
                if not cap.fits(shape):
                    heapq.heappop(heap)
                    continue
                if cap.id in self.avoid.get(d.job.id, ()):
                    skipped.append(heapq.heappop(heap))  # it failed there in a node-looking way
                    continue
                cost = tenant_cost(cap, shape, d.tenant)
                if not self.ledger.can_use(d.tenant, cost):
                    skipped.append(heapq.heappop(heap))
                    if len(skipped) > 8:  # this tenant is over budget on shared capacity
                        break
                    continue
                self.ledger.use(d.tenant, cost)
                binding = cap.take(shape)
                if cap.fits(shape):
                    heapq.heapreplace(heap, (cap.key(shape), item[1], cap))
                else:
                    heapq.heappop(heap)
                self._bound(d, (binding,), f"best fit on existing {cap.offering.instance_type} {cap.id}")
                placed = True
                break
            for s in skipped:
                heapq.heappush(heap, s)
            if not placed:
                rest.append(d)
        return rest

    def _buy(self, rest: list[Demand]) -> None:
        """Launch for the jobs existing instances could not take. A group shares
        shape and markets; jobs resuming a located checkpoint carry their own
        economics (where a move is free), so each economics buys on its own."""
        by_econ: dict[Economics, list[Demand]] = {}
        for d in rest:
            by_econ.setdefault(d.econ, []).append(d)
        for same in by_econ.values():
            self._buy_same(same)

    def _buy_same(self, rest: list[Demand]) -> None:
        shape, markets, econ = rest[0].shape, rest[0].markets, rest[0].econ
        first = self.index.classes(shape, markets)
        if not first:
            for d in rest:
                self._block(d, "no_offering", f"no usable {'/'.join(m.value for m in markets)} offering fits")
            return
        cap_group = max(1, max(c.per for c in first))
        pending = deque(rest)
        broke: set[str] = set()  # tenants that cannot afford any launch
        while pending:
            d0 = pending.popleft()
            if d0.tenant in broke:
                self._block(
                    d0, "budget", f"budget: no offering fits (headroom ${self.ledger.headroom(d0.tenant):.2f}/h)"
                )
                continue
            ranked = self.index.ranked(shape, markets, econ, group=min(len(pending) + 1, cap_group))
            pos = next((j for j in range(len(ranked)) if self.ledger.can_launch(d0.tenant, ranked.price(j))), None)
            if pos is None:
                broke.add(d0.tenant)
                self._block(
                    d0, "budget", f"budget: no offering fits (headroom ${self.ledger.headroom(d0.tenant):.2f}/h)"
                )
                continue
            choice = ranked[pos]
            o = choice.offering
            if d0.virtual:  # a replacement bought ahead of a reclaim: held for this job alone
                cap = self._launch(o, tenant=d0.tenant, reserved_for=d0.job.id,
                                   reason=f"replacement for {d0.job.id} ahead of a reclaim "
                                          f"(${choice.cost_per_work:.4f} per unit of work)")  # fmt: skip
                self._bound(d0, (cap.take(shape),), f"new {o.market.value} {o.instance_type} in {o.zone}")
                continue
            cap = self._launch(
                o,
                tenant=d0.tenant,
                alternatives=self._alternatives(ranked, pos, fill=choice.fill),
                reason=f"{d0.job.id}: ${choice.cost_per_work:.4f} per unit of work",
            )
            why = f"new {o.market.value} {o.instance_type} in {o.zone} (${choice.cost_per_work:.4f}/unit of work)"
            self._bound(d0, (cap.take(shape),), why)
            deferred: list[Demand] = []
            while pending and cap.fits(shape):
                d = pending.popleft()
                cost = tenant_cost(cap, shape, d.tenant)
                if self.ledger.can_use(d.tenant, cost):
                    self.ledger.use(d.tenant, cost)
                    self._bound(d, (cap.take(shape),), why)
                else:
                    deferred.append(d)
            pending.extendleft(reversed(deferred))
            if deferred and not cap.fits(shape):
                continue
            if deferred:  # room left but these tenants cannot pay for a share: they wait
                for d in deferred:
                    pending.remove(d)
                    self._block(d, "budget", "budget: tenant cap reached")

    def _alternatives(self, ranked: RankTable, pos: int, *, fill: int, zone: str | None = None) -> tuple[Offering, ...]:
        """The next-best offerings that can stand in for ``ranked[pos]``."""
        out: list[Offering] = []
        choice = ranked[pos]
        room = self.ledger.headroom("") if self.ledger.global_cap is not None else float("inf")
        for j in range(pos + 1, min(len(ranked), pos + 1 + 4 * self.knobs.max_alternatives)):
            if len(out) >= self.knobs.max_alternatives:
                break
            o, row_fill = ranked.offering_fill(j)
            if o is choice.offering or o.gpu_count < choice.offering.gpu_count or row_fill < fill:
                continue
            if zone is not None and o.zone != zone:
                continue
            if o.price_per_hour - choice.offering.price_per_hour > room:
                continue
            out.append(o)
        return tuple(out)

    def _launch(
        self,
        offering: Offering,
        *,
        tenant: str,
        alternatives: tuple[Offering, ...] = (),
        reason: str,
        placement_group: str | None = None,
        reserved_for: str | None = None,
    ) -> Cap:
        instance_id = self.new_id()
        self.ledger.launch(tenant, offering.price_per_hour)
        self.launches.append(Launch(instance_id, offering, alternatives, reason, placement_group, reserved_for))
        cap = Cap(instance_id, offering, new=True)
        cap.tenant = tenant
        cap.reserved_for = reserved_for
        self.fleet.add(cap)
        return cap

    # ------------------------------------------------------------ gangs
    def _place_gang(self, d: Demand, by_zone: dict[str, list[Cap]]) -> None:
        shape, n = d.shape, d.shape.nodes
        best: list[Cap] | None = None
        best_key: tuple[float, str] | None = None
        avoid = self.avoid.get(d.job.id, frozenset())
        for zone, all_caps in by_zone.items():
            caps = [c for c in all_caps if c.fits(shape)]
            by_zone[zone] = caps
            caps = [c for c in caps if c.id not in avoid]
            if len(caps) < n:
                continue
            chosen = sorted(caps, key=lambda c: c.key(shape))[:n]
            cost = sum(tenant_cost(c, shape, d.tenant) for c in chosen)
            key = (cost, zone)
            if self.ledger.can_use(d.tenant, cost) and (best_key is None or key < best_key):
                best, best_key = chosen, key
        if best is not None:
            self.ledger.use(d.tenant, best_key[0] if best_key else 0.0)
            bindings = tuple(c.take(shape, rank) for rank, c in enumerate(best))
            self._bound(d, bindings, f"gang of {n} on existing instances in {best[0].zone}")
            return
        ranked = self.index.ranked(shape, d.markets, d.econ, group=1)
        if not ranked:
            self._block(d, "no_offering", f"no usable {'/'.join(m.value for m in d.markets)} offering fits a node")
            return
        pos = next((j for j in range(len(ranked)) if self.ledger.can_launch(d.tenant, n * ranked.price(j))), None)
        if pos is None:
            self._block(d, "budget", f"budget: {n} nodes do not fit (headroom ${self.ledger.headroom(d.tenant):.2f}/h)")
            return
        o = ranked[pos].offering
        group_name = f"pg-{d.job.id}-{d.job.attempt}"
        caps = [
            self._launch(
                o,
                tenant=d.tenant,
                reason=f"{d.job.id}: gang node {r}",
                placement_group=group_name,
                reserved_for=d.job.id if d.virtual else None,
            )
            for r in range(n)
        ]
        bindings = tuple(c.take(shape, rank) for rank, c in enumerate(caps))
        self._bound(d, bindings, f"gang of {n} new {o.market.value} {o.instance_type} in {o.zone}, {group_name}")


def id_generator(new_id: Callable[[str], str], taken: Iterable[str], *, prefix: str = "sf") -> Callable[[], str]:
    """Instance ids from the snapshot's ``new_id`` (random live, sequential in
    tests and the simulator), never one already in use."""
    used = set(taken)

    def next_id() -> str:
        while True:
            candidate = new_id(prefix)
            if candidate not in used:
                used.add(candidate)
                return candidate

    return next_id
