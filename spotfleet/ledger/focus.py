"""FinOps FOCUS rows (FOCUS 1.1 column names): one row per ledger line.

Each row is one attributed piece of one billing segment (a job attempt's phase,
or idle) within one UTC day, so the rows of an instance sum to what the
instance cost and drop into FinOps tooling next to the cloud's own export.

- ``BilledCost`` = ``EffectiveCost`` = ``ContractedCost``: what was paid (no
  commitments or credits are modelled);
- ``ListCost``: the same time at the on-demand (list) price — the counterfactual;
- ``PricingCategory``: ``Dynamic`` for spot, ``Standard`` for on-demand;
- quantities in hours of the instance attributed to the row;
- ``Tags``: a JSON object of ``spotfleet:*`` keys (tenant, job, family, phase...);
- spotfleet-specific columns carry the ``x_`` prefix FOCUS reserves for them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from spotfleet.ledger import money
from spotfleet.ledger.attribution import Line

COLUMNS = [
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency",
    "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd",
    "ChargeCategory", "ChargeFrequency", "ChargeDescription",
    "ConsumedQuantity", "ConsumedUnit", "PricingCategory", "PricingQuantity", "PricingUnit",
    "ListUnitPrice", "ContractedUnitPrice",
    "ProviderName", "PublisherName", "InvoiceIssuerName", "ServiceCategory", "ServiceName",
    "RegionId", "RegionName", "AvailabilityZone",
    "ResourceId", "ResourceName", "ResourceType", "SkuId", "SkuPriceId", "Tags",
    "x_SpotfleetJobId", "x_SpotfleetTenant", "x_SpotfleetPhase", "x_SpotfleetAttempt", "x_GpuHours",
]  # fmt: skip
DECIMAL_COLUMNS = frozenset({"BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "ConsumedQuantity",
                             "PricingQuantity", "ListUnitPrice", "ContractedUnitPrice", "x_GpuHours"})  # fmt: skip
DATETIME_COLUMNS = frozenset({"BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"})

PROVIDERS = {
    "aws": ("AWS", "Amazon Elastic Compute Cloud"),
    "gcp": ("Google Cloud", "Compute Engine"),
}
Q6 = Decimal("0.000001")


def _ts(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _period(t: datetime) -> tuple[datetime, datetime]:
    start = t.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, end


def row(line: Line) -> dict[str, Any]:
    seg, a = line.segment, line.attempt
    provider, service = PROVIDERS.get(seg.provider, (seg.provider, f"{seg.provider} compute"))
    billed = money.dollars(line.cost).quantize(Q6)
    listed = money.dollars(line.on_demand).quantize(Q6)
    hours = (Decimal(line.seconds.numerator) / Decimal(line.seconds.denominator) / 3600).quantize(Q6)
    gpu_hours = (Decimal(line.gpu_seconds.numerator) / Decimal(line.gpu_seconds.denominator) / 3600).quantize(Q6)
    start, end = _period(line.start)
    who = f"{a.job_id} attempt {a.attempt}" if a else "idle"
    tags = {"spotfleet:market": seg.market, "spotfleet:phase": line.phase.value, "spotfleet:instance": seg.instance_id}
    if a is not None:
        tags.update({"spotfleet:tenant": a.tenant, "spotfleet:job": a.job_id, "spotfleet:family": a.family,
                     "spotfleet:job-name": a.job_name, "spotfleet:attempt": str(a.attempt)})  # fmt: skip
    return {
        "BilledCost": billed, "EffectiveCost": billed, "ListCost": listed, "ContractedCost": billed,
        "BillingCurrency": "USD", "BillingPeriodStart": _ts(start), "BillingPeriodEnd": _ts(end),
        "ChargePeriodStart": _ts(line.start), "ChargePeriodEnd": _ts(line.end),
        "ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based",
        "ChargeDescription": f"{seg.instance_type} {seg.market} in {seg.zone}: {who} ({line.phase.value})",
        "ConsumedQuantity": hours, "ConsumedUnit": "Hours",
        "PricingCategory": "Dynamic" if seg.market == "spot" else "Standard",
        "PricingQuantity": hours, "PricingUnit": "Hours",
        "ListUnitPrice": seg.on_demand_price_per_hour, "ContractedUnitPrice": seg.price_per_hour,
        "ProviderName": provider, "PublisherName": provider, "InvoiceIssuerName": provider,
        "ServiceCategory": "Compute", "ServiceName": service,
        "RegionId": seg.region, "RegionName": seg.region, "AvailabilityZone": seg.zone,
        "ResourceId": seg.resource_id or seg.instance_id, "ResourceName": seg.instance_id,
        "ResourceType": "Virtual Machine", "SkuId": seg.instance_type,
        "SkuPriceId": f"{seg.provider}:{seg.region}:{seg.instance_type}:{seg.market}",
        "Tags": json.dumps(tags, sort_keys=True),
        "x_SpotfleetJobId": a.job_id if a else "", "x_SpotfleetTenant": a.tenant if a else "",
        "x_SpotfleetPhase": line.phase.value, "x_SpotfleetAttempt": a.attempt if a else "",
        "x_GpuHours": gpu_hours,
    }  # fmt: skip


def rows(lines: list[Line]) -> list[dict[str, Any]]:
    return [row(ln) for ln in sorted(lines, key=lambda ln: (ln.start, ln.segment.instance_id, ln.job_id or ""))]
