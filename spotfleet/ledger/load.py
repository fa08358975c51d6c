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

from sqlalchemy import select

from spotfleet.ledger import money
from spotfleet.ledger.attribution import AttemptSpan, Ledger, Segment, attribute
from spotfleet.ledger.billing import BillingRule
from spotfleet.ledger.usage import AttemptUsage, load_usage, redone_fraction
from spotfleet.store.schema import BillingSegmentRow, InstanceRow, JobAttemptRow, JobRow
from spotfleet.store.store import Store


@dataclass(frozen=True, slots=True)
class LedgerData:
    ledger: Ledger
    usage: Mapping[tuple[str, int, int], AttemptUsage]
    now: datetime


def build(store: Store, *, now: datetime, rules: Mapping[str, BillingRule] | None = None,
          cuts: Sequence[datetime] = ()) -> LedgerData:  # fmt: skip
    with store.session() as s:
        provider_ids = {r.id: r.provider_id or "" for r in s.scalars(select(InstanceRow))}
        seg_rows = list(s.scalars(select(BillingSegmentRow).order_by(BillingSegmentRow.start, BillingSegmentRow.id)))
        att_rows = list(s.execute(
            select(JobAttemptRow, JobRow.tenant, JobRow.family, JobRow.name)
            .join(JobRow, JobRow.id == JobAttemptRow.job_id)
            .order_by(JobAttemptRow.job_id, JobAttemptRow.node_rank, JobAttemptRow.attempt)
        ).all())  # fmt: skip
    segments = [
        Segment(instance_id=r.instance_id, provider=r.provider, region=r.region, zone=r.zone,
                instance_type=r.instance_type, market=r.market, gpu_count=r.gpu_count,
                price_per_hour=money.price(r.price_per_hour),
                on_demand_price_per_hour=money.price(r.on_demand_price_per_hour), start=r.start, end=r.end,
                resource_id=provider_ids.get(r.instance_id, ""))
        for r in seg_rows
    ]  # fmt: skip
    usage = load_usage(store)
    per_node: dict[tuple[str, int], list[tuple[JobAttemptRow, str, str, str]]] = defaultdict(list)
    for row, tenant, family, name in att_rows:
        per_node[(row.job_id, row.node_rank)].append((row, tenant, family, name))
    spans: list[AttemptSpan] = []
    for (job_id, rank), rows in per_node.items():
        redone = redone_fraction([(r.attempt, r.outcome, usage.get((job_id, r.attempt, rank))) for r, *_ in rows])
        for r, tenant, family, name in rows:
            u = usage.get((job_id, r.attempt, rank))
            productive = u.first_progress_at if u is not None and u.first_progress_at is not None else r.started_at
            spans.append(AttemptSpan(
                job_id=job_id, attempt=r.attempt, node_rank=rank, instance_id=r.instance_id, gpus=r.gpus,
                mig_slices=r.mig_slices, bound_at=r.bound_at, ended_at=r.ended_at, productive_from=productive,
                redone=redone.get(r.attempt, Fraction(0)), outcome=r.outcome, gpu_share=r.gpu_share,
                tenant=tenant, family=family, job_name=name,
            ))  # fmt: skip
    return LedgerData(attribute(segments, spans, now=now, rules=rules, cuts=cuts), usage, now)
