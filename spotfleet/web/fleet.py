"""The Fleet page: what runs where, what it costs per hour, against which budget.

Spend rates come from ``policies.market.spend_rates`` — the function the budget
check in every plan uses — so "62 % of the research budget" here is what the
policy sees. Money so far comes from the ledger (the Costs page's numbers).
A tenant principal sees the instances its jobs hold, its GPUs on them, its own
budget and its own money.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spotfleet.api.principal import Principal
from spotfleet.ledger.load import LedgerData
from spotfleet.model.instance import Instance
from spotfleet.model.job import ACTIVE_JOB_STATES, Job
from spotfleet.model.snapshot import Budget
from spotfleet.policies.market import spend_rates
from spotfleet.store.store import Store
from spotfleet.web import costs

Leadership = Callable[[], dict[str, Any]]


@dataclass(slots=True)
class InstanceLine:
    instance: Instance
    gpus_busy: float  # GPUs' worth held by jobs (the principal's jobs, for a tenant)
    jobs: list[str]
    age_s: float

    @property
    def gpus_idle(self) -> float:
        return max(self.instance.gpu_count - self.gpus_busy, 0.0)


@dataclass(slots=True)
class BudgetLine:
    scope: str
    cap: float
    rate: float

    @property
    def used_pct(self) -> float:
        return 100 * self.rate / self.cap if self.cap else 0.0


@dataclass(slots=True)
class FleetView:
    instances: list[InstanceLine]
    groups: list[dict[str, Any]]
    budgets: list[BudgetLine]
    rate_per_hour: float
    gpus_total: int
    gpus_busy: float
    money: dict[str, Any]
    leader: dict[str, Any]
    chart: dict[str, Any] = field(default_factory=dict)


def _held(jobs: Sequence[Job], principal: Principal) -> tuple[dict[str, float], dict[str, list[str]]]:
    busy: dict[str, float] = defaultdict(float)
    on: dict[str, list[str]] = defaultdict(list)
    for job in jobs:
        if job.state not in ACTIVE_JOB_STATES or not principal.sees(job.spec.tenant):
            continue
        for b in job.bindings:
            busy[b.instance_id] += b.gpu_share
            on[b.instance_id].append(job.id)
    return busy, on


def fleet_view(store: Store, principal: Principal, *, now: datetime, budgets: Sequence[Budget],
               leadership: Leadership, ledger: LedgerData) -> FleetView:  # fmt: skip
    live = store.list_instances(live_only=True)
    active = store.list_jobs(states=ACTIVE_JOB_STATES)
    busy, on = _held(active, principal)
    total_rate, tenant_rates = spend_rates(live, active)
    shown = [i for i in live if principal.all_tenants or i.id in on]
    lines = [
        InstanceLine(i, busy.get(i.id, 0.0), on.get(i.id, []),
                     (now - (i.launched_at or i.created_at)).total_seconds())
        for i in shown
    ]  # fmt: skip
    if principal.all_tenants:
        rate = total_rate
        budget_lines = [
            BudgetLine("fleet" if b.tenant is None else f"tenant {b.tenant}", b.max_per_hour,
                       total_rate if b.tenant is None else tenant_rates.get(b.tenant, 0.0))
            for b in budgets
        ]  # fmt: skip
    else:
        rate = tenant_rates.get(principal.tenant or "", 0.0)
        budget_lines = [BudgetLine(f"tenant {b.tenant}", b.max_per_hour, rate) for b in budgets
                        if b.tenant == principal.tenant]  # fmt: skip
    totals = costs.report(ledger, principal).totals.figures()
    return FleetView(
        instances=lines, groups=_groups(lines), budgets=budget_lines, rate_per_hour=rate,
        gpus_total=sum(i.instance.gpu_count for i in lines), gpus_busy=sum(i.gpus_busy for i in lines),
        money=totals, leader=leadership(), chart=_chart(lines),
    )  # fmt: skip


def _groups(lines: Sequence[InstanceLine]) -> list[dict[str, Any]]:
    """Instances by provider / market / zone / type: count, GPUs busy and idle, $/h."""
    out: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for ln in lines:
        o = ln.instance.offering
        key = (o.provider, o.market.value, o.zone, o.instance_type)
        g = out.setdefault(key, {"provider": key[0], "market": key[1], "zone": key[2], "instance_type": key[3],
                                 "count": 0, "gpus": 0, "busy": 0.0, "rate": 0.0})  # fmt: skip
        g["count"] += 1
        g["gpus"] += o.gpu_count
        g["busy"] += ln.gpus_busy
        g["rate"] += o.price_per_hour
    return [out[k] for k in sorted(out)]


def _chart(lines: Sequence[InstanceLine]) -> dict[str, Any]:
    """GPUs in use vs idle per zone and market (stacked bars)."""
    keys = sorted({f"{ln.instance.offering.zone} · {ln.instance.market.value}" for ln in lines})
    busy = dict.fromkeys(keys, 0.0)
    idle = dict.fromkeys(keys, 0.0)
    for ln in lines:
        k = f"{ln.instance.offering.zone} · {ln.instance.market.value}"
        busy[k] += ln.gpus_busy
        idle[k] += ln.gpus_idle
    return {"labels": keys, "busy": [round(busy[k], 3) for k in keys], "idle": [round(idle[k], 3) for k in keys]}


def single_replica(cluster: str) -> Leadership:
    """Until leader election exists, this controller is the only replica and so
    the leader. A replicated controller passes its own ``leadership`` function."""
    import socket

    host = socket.gethostname()
    return lambda: {"role": "leader", "replica": host, "cluster": cluster, "replicated": False}
