"""Attribution: billing segments + job attempts → ledger lines (pure, exact).

For every instance, its billing segments (one price each) are billed under the
provider's rule (``billing``); each segment's cost is then split among the job
attempts that held its GPUs and idle:

- A job attempt's share of an instance is its GPUs' worth ÷ the instance's
  GPUs: whole GPUs, MIG compute slices ÷ 7, or a time-sliced fraction of one
  GPU (``job_attempts.gpu_share``). On a GPU-less instance the attempts bound
  to it share it equally.
- Whatever no attempt held is **idle** (paid, unattributed). The time a billing
  minimum adds after an instance ended is idle too (phase ``billing_minimum``).
- An attempt's time is split into phases. ``startup`` (first attempt) or
  ``restart`` (any later one) runs from bind to the first progress the job
  reported (or, for a job that never reports progress, until the agent saw its
  process start): the GPUs are paid and held, but no training step has
  happened yet. After that, ``useful`` — except the part of an interrupted
  attempt whose steps were rolled back to the last checkpoint and done again by
  a later attempt: ``redone`` (its fraction comes from ``AttemptSpan.redone``).
- A failure is not an interruption: all the time of an attempt that ended in
  a failure (the job exited non-zero), and the start-up of the retry that
  follows it, is ``failed`` — a cost of the job's bug, not of spot.

Each segment's cost is rounded once to a micro-dollar and split over
(attempt, phase, day, window) keys by largest remainder, so for every instance
the lines sum exactly to what the instance cost. The on-demand counterfactual
(same instance type and region at the on-demand price) is split the same way.
Lines never straddle a UTC midnight or one of the caller's ``cuts`` (a report
window), so a report can filter lines by time without prorating them.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction

from spotfleet.ledger import money
from spotfleet.ledger.billing import BillingRule, rule_for
from spotfleet.model.job import is_failure_outcome

MIG_SLICES_PER_GPU = 7


class Phase(enum.StrEnum):
    STARTUP = "startup"  # first attempt: bind → first progress
    RESTART = "restart"  # later attempts: bind → first progress (an interruption's overhead)
    USEFUL = "useful"  # progress that was kept
    REDONE = "redone"  # progress lost to a rollback and computed again later
    FAILED = "failed"  # held by an attempt that failed (exit ≠ 0), or restarting after one
    IDLE = "idle"  # paid, held by no job
    BILLING_MINIMUM = "billing_minimum"  # paid because of the provider's minimum, after the end


IDLE_PHASES = frozenset({Phase.IDLE, Phase.BILLING_MINIMUM})
INTERRUPTION_PHASES = frozenset({Phase.RESTART, Phase.REDONE})


@dataclass(frozen=True, slots=True)
class Segment:
    """Paid time of one instance at one price (a ``billing_segments`` row)."""

    instance_id: str
    provider: str
    region: str
    zone: str
    instance_type: str
    market: str
    gpu_count: int
    price_per_hour: Decimal
    on_demand_price_per_hour: Decimal
    start: datetime
    end: datetime | None  # None: still open (counted up to ``now``)
    resource_id: str = ""  # the cloud's instance id, when known


@dataclass(frozen=True, slots=True)
class AttemptSpan:
    """One node of one job attempt holding GPUs on one instance (a ``job_attempts`` row + job facts)."""

    job_id: str
    attempt: int
    node_rank: int
    instance_id: str
    gpus: int
    mig_slices: int
    bound_at: datetime
    ended_at: datetime | None
    productive_from: datetime | None = None  # first progress (or process start); None: never worked
    redone: Fraction = Fraction(0)  # fraction of the productive time whose work was rolled back
    outcome: str | None = None
    after_failure: bool = False  # the previous attempt of this node failed: its start-up is a retry
    gpu_share: float | None = None  # GPUs' worth held, when the binding recorded it (fractions of a GPU)
    tenant: str = ""
    family: str = ""
    job_name: str = ""

    def share(self, gpu_count: int) -> Fraction:
        if gpu_count <= 0:
            return Fraction(0)
        return min(self.gpu_equivalents(), Fraction(gpu_count)) / gpu_count

    def gpu_equivalents(self) -> Fraction:
        """GPUs' worth held: MIG slices ÷ 7 (exact), else the recorded share, else whole GPUs."""
        if self.mig_slices and not self.gpus:
            return Fraction(self.mig_slices, MIG_SLICES_PER_GPU)
        if self.gpu_share is not None and self.gpu_share > 0:
            return Fraction(str(self.gpu_share)).limit_denominator(10_000)
        return Fraction(self.gpus)


@dataclass(slots=True)
class Line:
    """One attributed piece of one segment: who, which phase, which day, how much."""

    segment: Segment
    phase: Phase
    day: date
    start: datetime
    end: datetime
    seconds: Fraction  # instance-seconds attributed (share × time)
    gpu_seconds: Fraction
    cost: int  # micro-dollars billed
    on_demand: int  # micro-dollars the same time would cost on-demand
    attempt: AttemptSpan | None = None  # None: idle

    @property
    def job_id(self) -> str | None:
        return self.attempt.job_id if self.attempt else None

    @property
    def idle(self) -> bool:
        return self.phase in IDLE_PHASES


@dataclass(slots=True)
class InstanceBill:
    instance_id: str
    used_seconds: Fraction
    billed_seconds: Fraction
    cost: int
    closed: bool


@dataclass(slots=True)
class Ledger:
    lines: list[Line] = field(default_factory=list)
    instances: dict[str, InstanceBill] = field(default_factory=dict)
    overfull: list[str] = field(default_factory=list)  # instances where held shares summed over 1 (a bug upstream)


def attribute(
    segments: Iterable[Segment],
    attempts: Iterable[AttemptSpan],
    *,
    now: datetime,
    rules: Mapping[str, BillingRule] | None = None,
    cuts: Sequence[datetime] = (),
) -> Ledger:
    """Build the ledger. Pure: same inputs, same lines, to the micro-dollar."""
    ledger = Ledger()
    by_instance: dict[str, list[Segment]] = defaultdict(list)
    for seg in segments:
        by_instance[seg.instance_id].append(seg)
    spans: dict[str, list[AttemptSpan]] = defaultdict(list)
    for a in attempts:
        spans[a.instance_id].append(a)
    cut_points = sorted(set(cuts))
    for instance_id in sorted(by_instance):
        segs = sorted(by_instance[instance_id], key=lambda s: s.start)
        _bill_instance(ledger, instance_id, segs, spans.get(instance_id, []), now=now, rules=rules, cuts=cut_points)
    return ledger


def _bill_instance(
    ledger: Ledger,
    instance_id: str,
    segs: list[Segment],
    spans: list[AttemptSpan],
    *,
    now: datetime,
    rules: Mapping[str, BillingRule] | None,
    cuts: list[datetime],
) -> None:
    ends = [min(s.end, now) if s.end is not None else now for s in segs]
    ends = [max(e, s.start) for e, s in zip(ends, segs, strict=True)]
    used = sum((_secs(e - s.start) for s, e in zip(segs, ends, strict=True)), Fraction(0))
    closed = segs[-1].end is not None
    rule = rule_for(segs[-1].provider, rules)
    billed = rule.billed_seconds(used, closed=closed)
    extra = billed - used  # rounding up and the minimum: charged after the last segment
    total = 0
    for i, (seg, end) in enumerate(zip(segs, ends, strict=True)):
        topup = extra if i == len(segs) - 1 else Fraction(0)
        total += _split_segment(ledger, seg, end, topup, spans, cuts)
    ledger.instances[instance_id] = InstanceBill(instance_id, used, billed, total, closed)


def _split_segment(
    ledger: Ledger, seg: Segment, end: datetime, topup: Fraction, spans: list[AttemptSpan], cuts: list[datetime]
) -> int:
    seconds = _secs(end - seg.start) + topup
    cost = money.cost_micros(seg.price_per_hour, seconds)
    od = money.cost_micros(seg.on_demand_price_per_hour, seconds)
    if seconds <= 0:
        return 0
    live = [a for a in spans if a.bound_at < end and (a.ended_at is None or a.ended_at > seg.start)]
    points = {seg.start, end}
    for span in live:
        for t in (span.bound_at, span.ended_at, span.productive_from):
            if t is not None and seg.start < t < end:
                points.add(t)
    points.update(_midnights(seg.start, end))
    points.update(t for t in cuts if seg.start < t < end)
    order = sorted(points)
    Key = tuple[int, Phase, date, int]  # (attempt index or -1, phase, day, window)
    weights: dict[Key, Fraction] = {}
    gpu_secs: dict[Key, Fraction] = defaultdict(Fraction)
    inst_secs: dict[Key, Fraction] = defaultdict(Fraction)
    bounds: dict[Key, tuple[datetime, datetime]] = {}

    def add(key: Key, w: Fraction, gs: Fraction, a: datetime, b: datetime) -> None:
        weights[key] = weights.get(key, Fraction(0)) + w
        gpu_secs[key] += gs
        inst_secs[key] += w
        lo, hi = bounds.get(key, (a, b))
        bounds[key] = (min(lo, a), max(hi, b))

    gpu_count = seg.gpu_count
    for t0, t1 in itertools.pairwise(order):
        dt = _secs(t1 - t0)
        day = t0.astimezone(UTC).date()
        window = bisect.bisect_right(cuts, t0)
        holders = [(i, x) for i, x in enumerate(live) if x.bound_at <= t0 and (x.ended_at is None or x.ended_at >= t1)]
        shares = {i: (x.share(gpu_count) if gpu_count > 0 else Fraction(1, len(holders))) for i, x in holders}
        held = sum(shares.values(), Fraction(0))
        if held > 1:
            ledger.overfull.append(seg.instance_id)
            shares = {i: s / held for i, s in shares.items()}
            held = Fraction(1)
        for i, x in holders:
            phase = _phase(x, t0)
            gs = dt * x.gpu_equivalents() if gpu_count > 0 else Fraction(0)
            add((i, phase, day, window), shares[i] * dt, gs, t0, t1)
        if held < 1:
            add((-1, Phase.IDLE, day, window), (1 - held) * dt, (1 - held) * dt * gpu_count, t0, t1)
    if topup > 0:
        day = end.astimezone(UTC).date()
        window = bisect.bisect_right(cuts, end)
        add((-1, Phase.BILLING_MINIMUM, day, window), topup, topup * gpu_count, end, end + _td(topup))
    costs = money.allocate(cost, weights)
    ods = money.allocate(od, weights)
    for key in weights:
        i, phase, day, _w = key
        attempt = live[i] if i >= 0 else None
        lo, hi = bounds[key]
        line = Line(seg, phase, day, lo, hi, inst_secs[key], gpu_secs[key], costs[key], ods[key], attempt)
        if attempt is not None and phase is Phase.USEFUL and attempt.redone > 0:
            ledger.lines.extend(_split_redone(line, attempt.redone))
        else:
            ledger.lines.append(line)
    return cost


def _split_redone(line: Line, fraction: Fraction) -> list[Line]:
    f = min(max(fraction, Fraction(0)), Fraction(1))
    redone_cost = money.round_half_up(line.cost * f)
    redone_od = money.round_half_up(line.on_demand * f)
    redone = Line(line.segment, Phase.REDONE, line.day, line.start, line.end, line.seconds * f,
                  line.gpu_seconds * f, redone_cost, redone_od, line.attempt)  # fmt: skip
    line.seconds -= redone.seconds
    line.gpu_seconds -= redone.gpu_seconds
    line.cost -= redone_cost
    line.on_demand -= redone_od
    return [line, redone]


def _phase(a: AttemptSpan, at: datetime) -> Phase:
    if is_failure_outcome(a.outcome):
        return Phase.FAILED
    if a.productive_from is None or at < a.productive_from:
        if a.after_failure:
            return Phase.FAILED
        return Phase.STARTUP if a.attempt <= 1 else Phase.RESTART
    return Phase.USEFUL


def _midnights(start: datetime, end: datetime) -> list[datetime]:
    out = []
    day = start.astimezone(UTC).date() + timedelta(days=1)
    while (t := datetime.combine(day, time(), tzinfo=UTC)) < end:
        out.append(t)
        day += timedelta(days=1)
    return out


def _secs(delta: timedelta) -> Fraction:
    return Fraction(delta.days * 86400 + delta.seconds) + Fraction(delta.microseconds, 1_000_000)


def _td(seconds: Fraction) -> timedelta:
    return timedelta(seconds=float(seconds))
