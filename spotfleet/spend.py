"""Spend so far, from billing segments: what the demo, ``/v1/summary`` and the
status views show. (Per-job attribution and reports are the ledger's job.)

Open segments are counted up to ``now``. The on-demand counterfactual prices the
same instance-hours at the same instance type's on-demand price. This is the
cheap running view (seconds × price under the ledger's billing rules, read on
every refresh); the ledger (``spotfleet.ledger``) is the authoritative bill: it
attributes every dollar to jobs or idle, in micro-dollars.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from spotfleet.store.store import Store


@dataclass(slots=True)
class SpendSummary:
    jobs_by_state: dict[str, int] = field(default_factory=dict)
    instances_by_market: dict[str, int] = field(default_factory=dict)  # live now
    instance_hours: dict[str, float] = field(default_factory=dict)  # by market
    dollars: dict[str, float] = field(default_factory=dict)  # by market
    on_demand_equivalent: float = 0.0
    rate_per_hour: float = 0.0  # live instances' spend rate

    @property
    def total(self) -> float:
        return sum(self.dollars.values())

    @property
    def savings(self) -> float:
        return self.on_demand_equivalent - self.total

    def to_dict(self) -> dict[str, Any]:
        return {
            "jobs_by_state": self.jobs_by_state,
            "instances_by_market": self.instances_by_market,
            "instance_hours": self.instance_hours,
            "dollars": self.dollars,
            "total_dollars": self.total,
            "on_demand_equivalent": self.on_demand_equivalent,
            "savings": self.savings,
            "rate_per_hour": self.rate_per_hour,
        }


def summarize(store: Store, *, now: datetime) -> SpendSummary:
    """Dollars so far under the same billing rules as the ledger: an instance
    that has ended pays at least its provider's minimum (60 s by default), so
    once the fleet is idle this total equals ``spotfleet cost report``'s."""
    from spotfleet.ledger.billing import rule_for

    out = SpendSummary()
    out.jobs_by_state = dict(Counter(j.state.value for j in store.list_jobs()))
    live = store.list_instances(live_only=True)
    out.instances_by_market = dict(Counter(i.market.value for i in live))
    out.rate_per_hour = sum(i.offering.price_per_hour for i in live if i.launched_at is not None)
    by_instance: dict[str, list[Any]] = {}
    for seg in store.billing_segments():
        by_instance.setdefault(seg.instance_id, []).append(seg)
    for segs in by_instance.values():
        segs.sort(key=lambda s: s.start)
        seconds = [max(0.0, ((s.end or now) - s.start).total_seconds()) for s in segs]
        closed = segs[-1].end is not None
        billed = float(rule_for(segs[-1].provider).billed_seconds(Fraction(sum(seconds)), closed=closed))
        seconds[-1] += max(0.0, billed - sum(seconds))  # rounding up and the minimum, at the last price
        for seg, secs in zip(segs, seconds, strict=True):
            hours = secs / 3600.0
            out.instance_hours[seg.market] = out.instance_hours.get(seg.market, 0.0) + hours
            out.dollars[seg.market] = out.dollars.get(seg.market, 0.0) + hours * seg.price_per_hour
            out.on_demand_equivalent += hours * seg.on_demand_price_per_hour
    return out
