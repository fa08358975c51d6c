"""Selection: rank offerings by expected cost per unit of useful work.

For one node-shape of a job on offering ``o``::

    cost_per_work = (price(o) · (1 + overhead(o)) / fill(o) + egress_per_hour(o))
                    / (throughput(o.gpu) · scaling(o) · gpu_units)

    overhead(o)   = hazard(o) · nodes · (lost_work_h + restart_delay_h)

- ``fill`` is how many nodes of this shape one instance holds (capped at the
  number of like jobs waiting), so a lone 1-GPU job pays for a whole 8-GPU box
  while eight of them share it: with ``fill·gpu_units = gpu_count`` this is
  the issue's ``price / (throughput × gpus) × (1 + overhead)``.
- ``hazard`` is interruptions per instance-hour (``pool_reclaim_rate``: 0
  on-demand; for spot the larger of a trace-derived prior updated by our own
  reclaims and one over the expected rest of the pool's current available
  run); a gang is interrupted when any of its ``nodes`` is.
- ``lost_work_h`` is half the checkpoint interval (the expected distance to the
  last checkpoint), or half the job's expected duration when it does not
  checkpoint; ``restart_delay_h`` is the knob of that name.
- ``egress_per_hour`` is the one-off cost of moving the job's declared dataset
  to a different region/cloud, spread over its expected duration, plus, for a
  job resuming from a checkpoint of declared size, the cost of moving that
  checkpoint from where it was written, spread over the run the move buys
  (``resume_egress_per_hour``).
- ``throughput`` is ``spec.throughput`` scaled by the table, the family's
  learned figure, or the table (``throughput.py``).
- ``scaling`` is the gang's multi-node scaling efficiency on the offering's
  inter-node fabric (``throughput.scaling_efficiency``: 1.0 for one node;
  per doubling of the gang 0.975 on EFA, 0.95 on GPUDirect-TCPX, 0.75 on plain
  TCP), so a gang on plain TCP costs more per unit of work than on EFA.

Hard constraints (GPU count/type/memory, NVLink, MIG, allowed regions and
providers, max price, market allowed by the market policy, pool not marked
unavailable) reject an offering; ``rank(..., explain=True)`` keeps the reason.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import overload

from spotfleet.model.job import Job
from spotfleet.model.offering import Market, NodeRequirements, Offering
from spotfleet.policies import throughput as tp
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.shape import Shape


@dataclass(frozen=True, slots=True)
class Economics:
    """The job-level inputs of the cost formula (hashable: jobs group by it)."""

    lost_work_h: float
    restart_delay_h: float
    expected_hours: float
    learned: tuple[tuple[str, float], ...] = ()  # GPU -> work/GPU-hour of the family
    override: float | None = None  # spec.throughput: work per A100-hour-equivalent
    dataset_region: str | None = None
    dataset_gib: float = 0.0
    # where the job's checkpoint is (provider, region) when resuming it elsewhere costs egress, its
    # size, and the work left: a resume's egress is spread over the run it buys (``resume_egress_per_hour``)
    resume_from: tuple[str, str] | None = None
    resume_gib: float = 0.0
    resume_work_h: float = 0.0

    def throughput(self, gpu: str) -> float:
        if self.learned:
            return tp.scaled_throughput(gpu, dict(self.learned))
        base = tp.table_throughput(gpu)
        return base * self.override if self.override is not None else base


def economics_of(job: Job, forecast: Forecast, knobs: Knobs, *, resume: bool = True) -> Economics:
    """The job's economics; ``resume=False`` leaves out its checkpoint's location
    (what depends on the spec alone, shared by every job of that spec)."""
    spec = job.spec
    if spec.expected_duration is not None:
        hours = spec.expected_duration.total_seconds() / 3600.0
    else:
        predicted = forecast.duration_s(spec.job_family)
        hours = predicted / 3600.0 if predicted else knobs.default_duration_h
    hours = max(hours, 1e-3)
    interval = spec.checkpoint.interval
    lost = interval.total_seconds() / 7200.0 if interval is not None else hours / 2.0
    learned = tuple(sorted(forecast.family_throughput(spec.job_family).items()))
    where, gib, left = _resume_terms(job, hours) if resume else (None, 0.0, 0.0)
    return Economics(
        lost_work_h=lost,
        restart_delay_h=knobs.restart_delay_h,
        expected_hours=hours,
        learned=learned,
        override=spec.throughput,
        dataset_region=spec.dataset.region if spec.dataset else None,
        dataset_gib=spec.dataset.size_gib if spec.dataset else 0.0,
        resume_from=where,
        resume_gib=gib,
        resume_work_h=left,
    )


def checkpoint_location(job: Job) -> tuple[str, str] | None:
    """(provider, region) where the job's checkpoint was written (``Checkpoint.provider``/
    ``region``, stamped by the controller from the instance it ran on), when resuming
    it elsewhere costs egress (a declared ``checkpoint.size_gib``); else None."""
    ckpt = job.checkpoint
    if ckpt is None or job.spec.checkpoint.size_gib <= 0 or ckpt.provider is None or ckpt.region is None:
        return None
    return ckpt.provider, ckpt.region


def _resume_terms(job: Job, hours: float) -> tuple[tuple[str, str] | None, float, float]:
    """The checkpoint a requeued (or threatened) job resumes from: its location
    (``checkpoint_location``), its declared size and the work left."""
    where = checkpoint_location(job)
    if where is None:
        return None, 0.0, 0.0
    from spotfleet.policies.market import progress_hours

    return where, job.spec.checkpoint.size_gib, max(0.0, hours - progress_hours(job, hours))


@dataclass(frozen=True, slots=True)
class Scored:
    """One offering with its expected cost per unit of work and the terms."""

    offering: Offering
    cost_per_work: float
    throughput: float
    hazard: float
    overhead: float
    egress_per_hour: float
    fill: int
    scaling: float = 1.0  # multi-node scaling efficiency on the offering's fabric


@dataclass(slots=True)
class Ranking:
    scored: list[Scored] = field(default_factory=list)  # best first
    rejected: list[tuple[Offering, str]] = field(default_factory=list)

    def best(self) -> Scored | None:
        return self.scored[0] if self.scored else None


@dataclass(frozen=True, slots=True)
class OfferingClass:
    """Offerings that differ only in price (and zone): same instance type,
    market, hazard (and region, when egress matters). Within a class the cost
    formula is increasing in price, so members are kept cheapest first and a
    ranking scores one member per class at a time."""

    members: tuple[Offering, ...]  # cheapest first
    hazard: float
    per: int  # nodes of the shape per instance
    speed: float  # table work per GPU-hour × scaling
    scaling: float = 1.0  # the shape's multi-node scaling efficiency on this type's fabric


@dataclass(frozen=True, slots=True)
class ClassTerms:
    """Per class of a class list, what its ranking reads but a checkpoint's
    resume does not: the cost per work of its cheapest member (``keys``, with a
    dataset's egress), its speed, that per-work egress (``adds``; None: none),
    the classes in ``keys`` order (ties: price, then class order) and the
    number of offerings."""

    keys: list[float]
    speeds: list[float]
    adds: list[float] | None
    order: list[int]
    n: int


class RankTable(Sequence[Scored]):
    """Offerings ranked for one (shape, markets, economics, group size).

    Design choice: a lazy k-way merge over ``OfferingClass``es. Within a class
    the cost is increasing in price, so a heap holds one member per class.
    Classes enter the heap in the order of their cost without a checkpoint's
    resume (``ClassTerms``, shared by every job of a spec); a resume only adds
    cost, so a class whose shared cost is above the heap's best cannot come
    first yet and waits. Planning usually reads one or two rows: a job that
    resumes a located checkpoint scores only the classes that can still come
    first, not all ~170 of the catalog (``bench/plan_scale.py
    --located-share``; docs/policies.md, "A mass requeue"). Rows come out in
    exact cost order (ties: price, then class order).
    """

    __slots__ = (
        "_built",
        "_classes",
        "_econ",
        "_extra",
        "_group",
        "_heap",
        "_index",
        "_k",
        "_next",
        "_rates",
        "_rows",
        "_shape",
        "_terms",
    )

    def __init__(
        self, index: OfferingIndex, shape: Shape, econ: Economics, group: int, classes: list[OfferingClass]
    ) -> None:
        self._index, self._shape, self._econ, self._group, self._classes = index, shape, econ, group, classes
        self._k = shape.nodes * (econ.lost_work_h + econ.restart_delay_h)
        self._terms = index.class_terms(shape, econ, group, classes)
        # per job (its checkpoint's place, size, work left): the only term computed afresh
        located = econ.resume_from is not None and econ.resume_gib > 0
        self._rates = index.move_rates(classes, econ.resume_from) if located and econ.resume_from else None
        self._extra: dict[int, float] = {}
        self._heap: list[tuple[float, float, int, int]] = []
        self._next = 0  # position in ``_terms.order`` of the next class to enter the heap
        self._rows: list[tuple[float, float, int, int]] = []
        self._built: dict[int, Scored] = {}

    def _admit(self) -> None:
        """Push every class whose shared cost is not above the heap's best."""
        heap, terms, classes = self._heap, self._terms, self._classes
        order, keys = terms.order, terms.keys
        while self._next < len(order):
            ci = order[self._next]
            key = keys[ci]
            if heap and heap[0][0] < key:
                return
            self._next += 1
            c = classes[ci]
            if self._rates is not None and self._rates[ci]:
                extra = self._extra[ci] = (
                    self._econ.resume_gib
                    * self._rates[ci]
                    / resume_spread_h(self._econ, c.hazard * self._shape.nodes)
                    / terms.speeds[ci]
                )
                key += extra
            heapq.heappush(heap, (key, c.members[0].price_per_hour, ci, 0))

    def _expand(self, i: int) -> None:
        rows, heap, classes, terms = self._rows, self._heap, self._classes, self._terms
        while len(rows) <= i:
            self._admit()
            if not heap:
                return
            item = heapq.heappop(heap)
            rows.append(item)
            ci, mi = item[2], item[3] + 1
            c = classes[ci]
            if mi < len(c.members):
                fill = self._fill(c)
                add = (terms.adds[ci] if terms.adds is not None else 0.0) + self._extra.get(ci, 0.0)
                price = c.members[mi].price_per_hour
                heapq.heappush(
                    heap, (price * (1.0 + c.hazard * self._k) / fill / terms.speeds[ci] + add, price, ci, mi)
                )

    def __len__(self) -> int:
        return self._terms.n

    @overload
    def __getitem__(self, i: int) -> Scored: ...
    @overload
    def __getitem__(self, i: slice) -> list[Scored]: ...
    def __getitem__(self, i: int | slice) -> Scored | list[Scored]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += self._terms.n
        if not 0 <= i < self._terms.n:
            raise IndexError(i)
        found = self._built.get(i)
        if found is None:
            self._expand(i)
            _, _, ci, mi = self._rows[i]
            c = self._classes[ci]
            found = self._built[i] = score(
                c.members[mi],
                shape=self._shape,
                econ=self._econ,
                hazard=c.hazard,
                group=self._group,
                index=self._index,
                knobs=self._index.knobs,
            )
        return found

    def __iter__(self) -> Iterator[Scored]:
        for i in range(self._terms.n):
            yield self[i]

    def price(self, i: int) -> float:
        self._expand(i)
        return self._rows[i][1]

    def offering_fill(self, i: int) -> tuple[Offering, int]:
        """Row ``i``'s offering and fill (``Scored.fill``) without scoring it:
        what a launch's alternatives are chosen by (``Placer._alternatives``)."""
        self._expand(i)
        _, _, ci, mi = self._rows[i]
        c = self._classes[ci]
        return c.members[mi], self._fill(c)

    def _fill(self, c: OfferingClass) -> int:
        """Nodes of this table's shape one instance of ``c`` holds, capped at the group."""
        return c.per if c.per < self._group else self._group

    def max_fill(self) -> int:
        return max((c.per for c in self._classes), default=0)


def _speed_function(econ: Economics) -> Callable[[str], float]:
    if econ.learned:
        learned = dict(econ.learned)
        cache: dict[str, float] = {}

        def learned_speed(gpu: str) -> float:
            v = cache.get(gpu)
            if v is None:
                v = cache[gpu] = tp.scaled_throughput(gpu, learned)
            return v

        return learned_speed
    if econ.override is not None:
        factor = econ.override
        return lambda gpu: tp.table_throughput(gpu) * factor
    return tp.table_throughput


class OfferingIndex:
    """Offerings grouped by instance type, with per-plan caches.

    Design choice: type-level constraints (GPU count, model, memory, NVLink,
    MIG) are checked once per (shape, instance type) — 85 types instead of
    1,500 offerings — and only the where/price checks run per offering.
    Rankings are cached by what the cost formula actually reads (an
    on-demand-only ranking ignores the interruption terms).
    """

    def __init__(
        self,
        offerings: Iterable[Offering],
        *,
        forecast: Forecast,
        unavailable: dict[str, datetime] | None = None,
        now: datetime | None = None,
        knobs: Knobs | None = None,
    ) -> None:
        self.forecast = forecast
        self.knobs = knobs or Knobs()
        self.now = now
        self.unavailable = unavailable or {}
        self.by_type: dict[tuple[str, str], list[Offering]] = {}
        self.regions_of: dict[str, set[str]] = {}
        self.hazard: dict[int, float] = {}
        self.usable_ids: set[int] = set()
        for o in offerings:
            self.by_type.setdefault((o.provider, o.instance_type), []).append(o)
            self.regions_of.setdefault(o.provider, set()).add(o.region)
            self.hazard[id(o)] = pool_reclaim_rate(forecast, o)
            if self._usable(o):
                self.usable_ids.add(id(o))
        self._type_ok: dict[tuple[Shape, str, str], str | None] = {}
        self._classes: dict[tuple[Shape, tuple[Market, ...], bool], list[OfferingClass]] = {}
        self._ranked: dict[tuple[object, ...], RankTable] = {}
        self._terms: dict[tuple[object, ...], ClassTerms] = {}
        self._rates: dict[tuple[int, tuple[str, str]], list[float]] = {}

    def hazard_of(self, offering: Offering) -> float:
        found = self.hazard.get(id(offering))
        return found if found is not None else pool_reclaim_rate(self.forecast, offering)

    def _usable(self, offering: Offering) -> bool:
        if not offering.available:
            return False
        until = self.unavailable.get(offering.key) if self.unavailable else None
        return until is None or self.now is None or until <= self.now

    def usable(self, offering: Offering) -> bool:
        return id(offering) in self.usable_ids or (id(offering) not in self.hazard and self._usable(offering))

    def type_rejection(self, shape: Shape, offering: Offering) -> str | None:
        key = (shape, offering.provider, offering.instance_type)
        try:
            return self._type_ok[key]
        except KeyError:
            reason = offering.rejection(shape.type_req) or shape.share_rejection(offering)
            self._type_ok[key] = reason
            return reason

    def accepts(self, shape: Shape, offering: Offering, markets: tuple[Market, ...]) -> bool:
        """Fast hard-constraint check (no reason): used for capacity scans."""
        if offering.market not in markets:
            return False
        if self.type_rejection(shape, offering) is not None:
            return False
        return _location_ok(shape.req, offering)

    def classes(self, shape: Shape, markets: tuple[Market, ...], *, by_region: bool = False) -> list[OfferingClass]:
        """Usable offerings meeting every hard constraint, as price-ordered classes."""
        key = (shape, markets, by_region)
        found = self._classes.get(key)
        if found is not None:
            return found
        out: list[OfferingClass] = []
        usable = self.usable_ids
        for group in self.by_type.values():
            if self.type_rejection(shape, group[0]) is not None:
                continue
            per = shape.per_instance(group[0])
            if per <= 0:
                continue
            scaling = tp.scaling_efficiency(group[0].interconnect, shape.nodes)
            speed = tp.table_throughput(group[0].gpu) * scaling
            split: dict[tuple[Market, float, str], list[Offering]] = {}
            for o in group:
                if o.market in markets and id(o) in usable and _location_ok(shape.req, o):
                    split.setdefault((o.market, self.hazard[id(o)], o.region if by_region else ""), []).append(o)
            for (_, hazard, _), members in split.items():
                members.sort(key=lambda o: o.price_per_hour)
                out.append(OfferingClass(tuple(members), hazard, per, speed, scaling))
        self._classes[key] = out
        return out

    def class_terms(self, shape: Shape, econ: Economics, group: int, classes: list[OfferingClass]) -> ClassTerms:
        """``ClassTerms`` of ``classes`` for these economics: everything a ranking
        reads but a checkpoint's resume, cached so that many requeued jobs of
        one spec, each with its own checkpoint, share one pass over the classes
        (the key is what the terms read; the checkpoint is not in it)."""
        dataset = econ.dataset_region is not None and econ.dataset_gib > 0
        key = (
            id(classes), shape.nodes, shape.gpu_units, econ.lost_work_h + econ.restart_delay_h, econ.learned,
            econ.override, (econ.dataset_region, econ.dataset_gib, econ.expected_hours) if dataset else None, group,
        )  # fmt: skip
        found = self._terms.get(key)
        if found is not None:
            return found
        units = shape.gpu_units if shape.gpu_units > 0 else 1.0
        k = shape.nodes * (econ.lost_work_h + econ.restart_delay_h)
        speed_of = _speed_function(econ) if econ.learned or econ.override is not None else None
        if speed_of is None:
            speeds = [c.speed * units for c in classes]
        else:
            speeds = [speed_of(c.members[0].gpu) * c.scaling * units for c in classes]
        keys = [
            c.members[0].price_per_hour * (1.0 + c.hazard * k) / (c.per if c.per < group else group) / speed
            for c, speed in zip(classes, speeds, strict=True)
        ]
        adds: list[float] | None = None
        if dataset:
            adds = [
                egress_cost(econ, c.members[0], index=self, knobs=self.knobs) / econ.expected_hours / speed
                for c, speed in zip(classes, speeds, strict=True)
            ]
            keys = [key + a for key, a in zip(keys, adds, strict=True)]
        order = sorted(range(len(classes)), key=lambda ci: (keys[ci], classes[ci].members[0].price_per_hour, ci))
        found = self._terms[key] = ClassTerms(keys, speeds, adds, order, sum(len(c.members) for c in classes))
        return found

    def move_rates(self, classes: list[OfferingClass], source: tuple[str, str]) -> list[float]:
        """USD/GiB to move a checkpoint from ``source`` to each class's region
        (``move_rate_per_gib``), cached per class list and source."""
        key = (id(classes), source)
        found = self._rates.get(key)
        if found is None:
            found = self._rates[key] = [move_rate_per_gib(source, c.members[0], self.knobs) for c in classes]
        return found

    def compatible(self, shape: Shape, markets: tuple[Market, ...]) -> list[Offering]:
        return [o for c in self.classes(shape, markets) for o in c.members]

    def ranked(self, shape: Shape, markets: tuple[Market, ...], econ: Economics, *, group: int = 1) -> RankTable:
        """Compatible offerings, cheapest expected cost per unit of work first."""
        spot = Market.SPOT in markets
        dataset = (econ.dataset_region, econ.dataset_gib, econ.expected_hours) if econ.dataset_region else None
        resume = (econ.resume_from, econ.resume_gib, econ.resume_work_h) if econ.resume_from else None
        key = (
            shape,
            markets,
            econ.lost_work_h + econ.restart_delay_h if spot else None,
            econ.learned,
            econ.override,
            dataset,
            resume,
            group,
        )
        found = self._ranked.get(key)
        if found is None:
            classes = self.classes(shape, markets, by_region=dataset is not None or resume is not None)
            found = self._ranked[key] = RankTable(self, shape, econ, group, classes)
        return found


def _location_ok(req: NodeRequirements, o: Offering) -> bool:
    if req.providers and o.provider not in req.providers:
        return False
    if req.regions and o.region not in req.regions:
        return False
    return req.max_price_per_hour is None or o.price_per_hour <= req.max_price_per_hour


def pool_reclaim_rate(forecast: Forecast, offering: Offering) -> float:
    """A pool's reclaim rate, for ranking it and for moves to or from it: the
    larger of the learned hazard (reclaims of our own instances,
    ``Forecast.hazard``: slow to learn, ``PRIOR_STRENGTH_HOURS`` of prior) and
    one over the expected rest of the pool's current available run, from the
    runs observed every step and the run's age (``SpotSupply.remaining_up_h``:
    a run of availability is how long a spot instance there lives). The
    pessimistic one, because a placement is paid before its benefit: a cheap
    pool that comes back for minutes between blips is priced by its blips, not
    by the few reclaims our instances have had there (before this the ranking
    read only those, and sent a requeued job back into such a pool at every
    reclaim). 0 on on-demand."""
    learned = forecast.hazard(offering)
    if offering.market is not Market.SPOT:
        return learned
    life = forecast.pool_supply(offering).remaining_up_h
    return max(learned, 1.0 / life if life > 0 else 0.0)


def egress_cost(econ: Economics, offering: Offering, *, index: OfferingIndex | None, knobs: Knobs) -> float:
    """One-off USD to move the job's dataset to ``offering``'s region, at the
    rate ``move_rate_per_gib`` charges checkpoints. The dataset names a region,
    not a cloud: it counts as ``offering``'s cloud when that cloud has the region."""
    if econ.dataset_region is None or econ.dataset_gib <= 0 or econ.dataset_region == offering.region:
        return 0.0
    same_cloud = index is not None and econ.dataset_region in index.regions_of.get(offering.provider, ())
    source = (offering.provider if same_cloud else "", econ.dataset_region)
    return econ.dataset_gib * move_rate_per_gib(source, offering, knobs)


def move_rate_per_gib(src: tuple[str, str], dst: Offering, knobs: Knobs) -> float:
    """USD/GiB to move data from ``src`` (provider, region) to ``dst``'s region:
    free within a region, the inter-region rate within a cloud, internet egress
    between clouds."""
    if src == (dst.provider, dst.region):
        return 0.0
    return knobs.egress_inter_region_per_gib if src[0] == dst.provider else knobs.egress_internet_per_gib


def resume_egress_per_hour(econ: Economics, offering: Offering, hazard: float, knobs: Knobs) -> float:
    """USD per hour of resuming the job's checkpoint at ``offering``: moving it from
    where it was written (``move_rate_per_gib``), spread over the run the move
    buys — the work left, or on spot the pool's expected lifetime ``1/hazard``
    when shorter (after a reclaim the job is placed afresh, and the checkpoint is
    then where this run wrote it), and at least a restart (a job about to finish
    does not divide the move by nothing)."""
    if econ.resume_from is None or econ.resume_gib <= 0:
        return 0.0
    return econ.resume_gib * move_rate_per_gib(econ.resume_from, offering, knobs) / resume_spread_h(econ, hazard)


def resume_spread_h(econ: Economics, hazard: float) -> float:
    """Hours a resume's egress is spread over (``resume_egress_per_hour``)."""
    run = econ.resume_work_h
    if hazard > 0:
        run = min(run, 1.0 / hazard)
    return max(run, econ.restart_delay_h)


def score(
    offering: Offering,
    *,
    shape: Shape,
    econ: Economics,
    hazard: float,
    group: int = 1,
    index: OfferingIndex | None = None,
    knobs: Knobs | None = None,
) -> Scored:
    """The cost-per-work formula of the module docstring for one offering."""
    per_instance = shape.per_instance(offering)
    fill = min(per_instance, max(group, 1))
    speed = econ.throughput(offering.gpu)
    scaling = tp.scaling_efficiency(offering.interconnect, shape.nodes)
    units = shape.gpu_units if shape.gpu_units > 0 else 1.0
    overhead = hazard * shape.nodes * (econ.lost_work_h + econ.restart_delay_h)
    egress_h = egress_cost(econ, offering, index=index, knobs=knobs or Knobs()) / econ.expected_hours
    egress_h += resume_egress_per_hour(econ, offering, hazard * shape.nodes, knobs or Knobs())
    if fill <= 0:
        return Scored(offering, float("inf"), speed, hazard, overhead, egress_h, 0, scaling)
    cost = (offering.price_per_hour * (1.0 + overhead) / fill + egress_h) / (speed * scaling * units)
    return Scored(offering, cost, speed, hazard, overhead, egress_h, fill, scaling)


def rank(
    offerings: Iterable[Offering],
    *,
    shape: Shape,
    econ: Economics,
    markets: Sequence[Market],
    forecast: Forecast,
    group: int = 1,
    unavailable: dict[str, datetime] | None = None,
    now: datetime | None = None,
    market_reason: str = "",
    knobs: Knobs | None = None,
) -> Ranking:
    """Every offering scored or rejected with the constraint it failed (explain)."""
    items = list(offerings)
    index = OfferingIndex(items, forecast=forecast, unavailable=unavailable, now=now, knobs=knobs)
    ranking = Ranking()
    for o in items:
        reason = shape.rejection(o)
        if reason is None and o.market not in markets:
            reason = f"market {o.market.value} not allowed" + (f": {market_reason}" if market_reason else "")
        if reason is None and not index.usable(o):
            until = index.unavailable.get(o.key)
            reason = "marked unavailable" + (f" until {until.isoformat()}" if until else "") + " after a capacity error"
        if reason is None:
            s = score(o, shape=shape, econ=econ, hazard=index.hazard_of(o), group=group, index=index, knobs=index.knobs)
            if s.fill > 0:
                ranking.scored.append(s)
                continue
            reason = "instance too small for one node (cpus/memory)"
        ranking.rejected.append((o, reason))
    ranking.scored.sort(key=lambda s: (s.cost_per_work, s.offering.price_per_hour, s.offering.key))
    return ranking
