"""Read the ledger's inputs from the store and build it.

Segments come from ``billing_segments``; attempts from ``job_attempts`` joined
with their job (tenant, family, name) and their ``attempt_usage`` row:

- ``productive_from`` = the first progress the attempt reported beyond its
  resume checkpoint; for a job that never reports progress, the time its agent
  reported the process started (``job_attempts.started_at``); if neither, the
  attempt never worked and all its time is startup/restart overhead.
- ``redone`` = ``usage.redone_fraction`` over the attempts of each node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from spotfleet.ledger import money
from spotfleet.ledger.attribution import AttemptSpan, Ledger, Segment, attribute
from spotfleet.ledger.billing import BillingRule
from spotfleet.ledger.types import AttemptRecord, AttemptUsage
from spotfleet.ledger.usage import redone_fraction
from spotfleet.model.job import is_failure_outcome
from spotfleet.store.store import Store


@dataclass(frozen=True, slots=True)
class LedgerData:
    ledger: Ledger
    usage: Mapping[tuple[str, int, int], AttemptUsage]
    now: datetime


def build(store: Store, *, now: datetime, rules: Mapping[str, BillingRule] | None = None,
          cuts: Sequence[datetime] = ()) -> LedgerData:  # fmt: skip
    seg_records, attempts, usage = store.ledger_inputs()
    segments = [
        Segment(instance_id=r.instance_id, provider=r.provider, region=r.region, zone=r.zone,
                instance_type=r.instance_type, market=r.market, gpu_count=r.gpu_count,
                price_per_hour=money.price(r.price_per_hour),
                on_demand_price_per_hour=money.price(r.on_demand_price_per_hour), start=r.start, end=r.end,
                resource_id=r.resource_id)
        for r in seg_records
    ]  # fmt: skip
    per_node: dict[tuple[str, int], list[AttemptRecord]] = defaultdict(list)
    for record in attempts:
        per_node[(record.job_id, record.node_rank)].append(record)
    spans: list[AttemptSpan] = []
    for (job_id, rank), rows in per_node.items():
        redone = redone_fraction([(r.attempt, r.outcome, usage.get((job_id, r.attempt, rank))) for r in rows])
        previous: str | None = None
        for r in rows:
            after_failure, previous = is_failure_outcome(previous), r.outcome
            u = usage.get((job_id, r.attempt, rank))
            productive = u.first_progress_at if u is not None and u.first_progress_at is not None else r.started_at
            spans.append(AttemptSpan(
                job_id=job_id, attempt=r.attempt, node_rank=rank, instance_id=r.instance_id, gpus=r.gpus,
                mig_slices=r.mig_slices, bound_at=r.bound_at, ended_at=r.ended_at, productive_from=productive,
                redone=redone.get(r.attempt, Fraction(0)), outcome=r.outcome, after_failure=after_failure,
                gpu_share=r.gpu_share,
                tenant=r.tenant, family=r.family, job_name=r.job_name,
            ))  # fmt: skip
    return LedgerData(attribute(segments, spans, now=now, rules=rules, cuts=cuts), usage, now)
