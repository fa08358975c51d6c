"""Market policy (spot or on-demand) and spend budgets.

Which markets a job may use:

- ``critical`` → on-demand only (and may preempt opportunistic work);
- not interruptible → on-demand only: the cloud may reclaim spot regardless;
- ``opportunistic`` → spot only: it waits when no spot is usable or affordable;
- ``normal`` without a deadline → both, the ranking decides (the hazard term
  makes spot pay for its expected interruptions);
- a job with a ``deadline`` → a Uniform Progress policy (Can't Be Late,
  Wu et al., NSDI'24), see ``deadline_market``.

Budgets are spend-rate caps in USD/hour, global and per tenant. Spend is the
price of every live instance (they bill until gone) plus every launch in the
plan; a tenant's spend is its jobs' share of the instances they occupy (GPUs
used / GPUs of the instance), and a launch is charged in full to the tenant it
was bought for (conservative: the idle remainder counts against them until
someone else fills it). Lower-priority work is planned later, so it is what
waits when a cap is reached.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Job, JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Budget
from spotfleet.model.spec import Priority
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.shape import MIG_SLICES_PER_GPU

SPOT_ONLY = (Market.SPOT,)
ON_DEMAND_ONLY = (Market.ON_DEMAND,)
EITHER = (Market.SPOT, Market.ON_DEMAND)


@dataclass(frozen=True, slots=True)
class MarketDecision:
    markets: tuple[Market, ...]
    reason: str
    urgent: bool = False  # may preempt opportunistic work when it cannot be placed


def decide_market(
    job: Job,
    *,
    now: datetime,
    expected_hours: float | None,
    knobs: Knobs,
    last_market: Market | None = None,
) -> MarketDecision:
    spec = job.spec
    if spec.priority is Priority.CRITICAL:
        return MarketDecision(ON_DEMAND_ONLY, "critical jobs run on on-demand", urgent=True)
    if not spec.is_interruptible:
        return MarketDecision(ON_DEMAND_ONLY, "non-interruptible jobs run on on-demand (spot can be reclaimed)")
    if spec.priority is Priority.OPPORTUNISTIC:
        return MarketDecision(SPOT_ONLY, "opportunistic jobs run on spot only (wait for cheap capacity)")
    if spec.deadline is not None:
        return deadline_market(job, now=now, expected_hours=expected_hours, knobs=knobs, last_market=last_market)
    return MarketDecision(EITHER, "no deadline: spot or on-demand by expected cost per unit of work")


def progress_hours(job: Job, expected_hours: float) -> float:
    """Work done so far in hours: ``progress['fraction']`` × duration, or
    ``progress['done_s']``; 0 when the job reports neither."""
    fraction = job.progress.get("fraction")
    if isinstance(fraction, int | float):
        return max(0.0, min(1.0, float(fraction))) * expected_hours
    done = job.progress.get("done_s")
    if isinstance(done, int | float):
        return max(0.0, float(done) / 3600.0)
    return 0.0


def deadline_market(
    job: Job,
    *,
    now: datetime,
    expected_hours: float | None,
    knobs: Knobs,
    last_market: Market | None = None,
) -> MarketDecision:
    """Uniform Progress with a safety net and hysteresis.

    With ``C`` the expected work (hours), ``done`` the work done, the schedule
    expects ``C·(now − submitted)/(deadline − submitted)`` by now. In order:

    1. *safety net* — ``slack = (deadline − now) − (C − done)``; when it no
       longer covers one more interruption (restart delay + the work lost since
       the last checkpoint: the interval, or everything done when the job does
       not checkpoint) → on-demand;
    2. *behind* — done + margin < expected → on-demand, to catch up;
    3. *hysteresis* — last ran on on-demand and not yet ahead by the margin →
       stay on on-demand (no flapping at the boundary);
    4. otherwise *ahead* → spot only: it waits rather than pay on-demand while
       the schedule allows.

    The margin is ``knobs.deadline_margin_h`` (default one restart delay).
    Unknown duration → on-demand: without ``C`` nothing can be promised.
    """
    spec = job.spec
    assert spec.deadline is not None
    if expected_hours is None:
        return MarketDecision(ON_DEMAND_ONLY, "deadline but no expected duration: on-demand", urgent=True)
    done = progress_hours(job, expected_hours)
    remaining = max(0.0, expected_hours - done)
    left = (spec.deadline - now).total_seconds() / 3600.0
    slack = left - remaining
    interval = spec.checkpoint.interval
    lost = interval.total_seconds() / 3600.0 if interval is not None else done
    interruption = knobs.restart_delay_h + lost
    if slack <= interruption:
        return MarketDecision(
            ON_DEMAND_ONLY,
            f"deadline slack {slack:.2f} h no longer covers an interruption ({interruption:.2f} h): on-demand",
            urgent=True,
        )
    total = (spec.deadline - job.created_at).total_seconds() / 3600.0
    elapsed = (now - job.created_at).total_seconds() / 3600.0
    expected_done = expected_hours * min(1.0, max(0.0, elapsed / total)) if total > 0 else expected_hours
    margin = knobs.deadline_margin_h if knobs.deadline_margin_h is not None else knobs.restart_delay_h
    if done + margin < expected_done:
        return MarketDecision(
            ON_DEMAND_ONLY,
            f"behind uniform progress ({done:.2f} h done < {expected_done:.2f} h expected): on-demand",
            urgent=True,
        )
    if last_market is Market.ON_DEMAND and done < expected_done + margin:
        return MarketDecision(ON_DEMAND_ONLY, "on-demand until safely ahead of uniform progress (hysteresis)")
    return MarketDecision(SPOT_ONLY, f"ahead of uniform progress with {slack:.2f} h slack: spot")


def has_progress(job: Job) -> bool:
    return isinstance(job.progress.get("fraction"), int | float) or isinstance(job.progress.get("done_s"), int | float)


def should_leave_spot(job: Job, *, now: datetime, expected_hours: float | None, knobs: Knobs) -> str | None:
    """Why a RUNNING deadline job on spot should move to on-demand now, or None.

    Can't Be Late's argument: an unplanned interruption costs the restart
    delay *plus* the work since the last checkpoint; a planned move (checkpoint,
    then restart on on-demand) costs only the restart delay. So when the slack
    no longer covers an interruption but still covers a restart, move now —
    later it would be too late either way. Only for jobs that report progress:
    without it the schedule cannot be judged and a running job is left alone.
    """
    spec = job.spec
    if spec.deadline is None or expected_hours is None or not has_progress(job) or not spec.is_interruptible:
        return None
    done = progress_hours(job, expected_hours)
    slack = (spec.deadline - now).total_seconds() / 3600.0 - max(0.0, expected_hours - done)
    interval = spec.checkpoint.interval
    lost = interval.total_seconds() / 3600.0 if interval is not None else done
    if knobs.restart_delay_h < slack <= knobs.restart_delay_h + lost:
        return (f"deadline: slack {slack:.2f} h no longer covers an interruption "
                f"({knobs.restart_delay_h + lost:.2f} h) but covers a planned move: to on-demand")  # fmt: skip
    return None


# ---------------------------------------------------------------- budgets


def share_of(job: Job, instance: Instance) -> float:
    """The share of ``instance`` one node of ``job`` occupies (0..1)."""
    r = job.spec.resources
    n = instance.offering.gpu_count
    if r.mig:
        from spotfleet.model.spec import MIG_PROFILES

        return MIG_PROFILES[r.mig] / MIG_SLICES_PER_GPU / max(n, 1)
    if r.gpu_fraction:
        return r.gpu_fraction / max(n, 1)
    if r.gpus and n:
        return min(1.0, r.gpus / n)
    vcpus = instance.offering.vcpus
    return min(1.0, r.cpus / vcpus) if vcpus else 0.0


LIVE_STATES = frozenset(
    {
        InstanceState.REQUESTED,
        InstanceState.PROVISIONING,
        InstanceState.RUNNING,
        InstanceState.DRAINING,
        InstanceState.TERMINATING,
    }
)


def spend_rates(instances: Iterable[Instance], jobs: Iterable[Job]) -> tuple[float, dict[str, float]]:
    """(global USD/h of live instances, tenant → USD/h of their shares)."""
    live = {i.id: i for i in instances if i.state in LIVE_STATES}
    total = sum(i.offering.price_per_hour for i in live.values())
    tenants: dict[str, float] = {}
    for job in jobs:
        if job.state not in (JobState.BOUND, JobState.RUNNING, JobState.DRAINING):
            continue
        for b in job.bindings:
            inst = live.get(b.instance_id)
            if inst is not None:
                t = job.spec.tenant
                tenants[t] = tenants.get(t, 0.0) + inst.offering.price_per_hour * share_of(job, inst)
    return total, tenants


@dataclass(slots=True)
class BudgetLedger:
    """Running spend during one plan; every launch and bind asks it first."""

    global_cap: float | None
    tenant_caps: dict[str, float]
    spend: float
    tenant_spend: dict[str, float] = field(default_factory=dict)
    eps: float = 1e-9

    @classmethod
    def build(cls, budgets: Iterable[Budget], instances: Iterable[Instance], jobs: Iterable[Job]) -> BudgetLedger:
        global_cap: float | None = None
        tenant_caps: dict[str, float] = {}
        for b in budgets:
            if b.tenant is None:
                global_cap = b.max_per_hour if global_cap is None else min(global_cap, b.max_per_hour)
            else:
                prev = tenant_caps.get(b.tenant)
                tenant_caps[b.tenant] = b.max_per_hour if prev is None else min(prev, b.max_per_hour)
        total, tenants = spend_rates(instances, jobs)
        return cls(global_cap, tenant_caps, total, tenants)

    def can_launch(self, tenant: str, price: float) -> bool:
        if self.global_cap is not None and self.spend + price > self.global_cap + self.eps:
            return False
        cap = self.tenant_caps.get(tenant)
        return cap is None or self.tenant_spend.get(tenant, 0.0) + price <= cap + self.eps

    def launch(self, tenant: str, price: float) -> None:
        self.spend += price
        self.tenant_spend[tenant] = self.tenant_spend.get(tenant, 0.0) + price

    def can_use(self, tenant: str, cost: float) -> bool:
        cap = self.tenant_caps.get(tenant)
        return cap is None or cost <= 0 or self.tenant_spend.get(tenant, 0.0) + cost <= cap + self.eps

    def use(self, tenant: str, cost: float) -> None:
        if cost > 0:
            self.tenant_spend[tenant] = self.tenant_spend.get(tenant, 0.0) + cost

    def headroom(self, tenant: str) -> float:
        """USD/h this tenant may still add (inf without caps)."""
        room = float("inf")
        if self.global_cap is not None:
            room = self.global_cap - self.spend
        cap = self.tenant_caps.get(tenant)
        if cap is not None:
            room = min(room, cap - self.tenant_spend.get(tenant, 0.0))
        return room
