"""The operator's overview: what ``GET /v1/summary`` adds to the spend summary
and what ``spotfleet status`` shows.

One read of the store: the fleet grouped by provider, market and zone; jobs by
state and by tenant; the spend rate against every budget (a tenant's rate is
its jobs' share of the instances they hold, as the market policy counts it);
spend and savings so far; the recent notable events (warnings, interruptions,
drains, launch failures, ``down``/``resume``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from spotfleet.model.changes import FleetHold
from spotfleet.model.job import TERMINAL_JOB_STATES
from spotfleet.model.snapshot import Budget
from spotfleet.store.store import Store

NOTABLE_KINDS = frozenset({
    "instance.interrupt_injected", "instance.draining", "instance.launch_failed", "instance.orphan_terminated",
    "job.draining", "job.failed", "fleet.down", "fleet.resumed", "provider.error", "plan.rejected",
})  # fmt: skip


def overview(store: Store, *, now: datetime, budgets: Sequence[Budget], hold: FleetHold | None,
             events: int = 10) -> dict[str, Any]:  # fmt: skip
    from spotfleet.policies.market import spend_rates

    live = store.list_instances(live_only=True)
    jobs = store.list_jobs()
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for inst in live:
        o = inst.offering
        row = groups.setdefault((o.provider, o.market.value, o.zone), {
            "provider": o.provider, "market": o.market.value, "zone": o.zone, "region": o.region,
            "instances": 0, "gpus": 0, "rate_per_hour": 0.0, "states": {},
        })  # fmt: skip
        row["instances"] += 1
        row["gpus"] += o.gpu_count
        if inst.launched_at is not None:
            row["rate_per_hour"] += o.price_per_hour
        row["states"][inst.state.value] = row["states"].get(inst.state.value, 0) + 1
    by_tenant: dict[str, Counter[str]] = defaultdict(Counter)
    for job in jobs:
        by_tenant[job.spec.tenant][job.state.value] += 1
    active = [j for j in jobs if j.state not in TERMINAL_JOB_STATES]
    total_rate, tenant_rates = spend_rates(live, active)
    budget_rows = []
    for b in budgets:
        rate = total_rate if b.tenant is None else tenant_rates.get(b.tenant, 0.0)
        budget_rows.append({
            "scope": "global" if b.tenant is None else f"tenant:{b.tenant}", "tenant": b.tenant,
            "cap_per_hour": b.max_per_hour, "rate_per_hour": round(rate, 6),
            "used_pct": round(100 * rate / b.max_per_hour, 1) if b.max_per_hour else None,
        })  # fmt: skip
    notable = [e for e in store.events(limit=300) if e.level in ("warning", "error") or e.kind in NOTABLE_KINDS]
    return {
        "fleet": sorted(groups.values(), key=lambda r: (r["provider"], r["market"], r["zone"])),
        "jobs_by_tenant": {t: dict(c) for t, c in sorted(by_tenant.items())},
        "tenant_rates_per_hour": {t: round(r, 6) for t, r in sorted(tenant_rates.items())},
        "budgets": budget_rows,
        "down": None
        if hold is None
        else {
            "since": hold.since.isoformat(),
            "reason": hold.reason,
            "grace_seconds": hold.grace_seconds,
        },
        "events": [
            {
                "at": e.at.isoformat(),
                "kind": e.kind,
                "level": e.level,
                "message": e.message,
                "job_id": e.job_id,
                "instance_id": e.instance_id,
            }
            for e in notable[-events:]
        ],
        "generated_at": now.isoformat(),
    }
