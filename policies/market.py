"""Market policy (spot or on-demand) and spend budgets.

Which markets a job may use:

- ``critical`` → on-demand only (and may preempt opportunistic work);
- not interruptible → on-demand only: the cloud may reclaim spot regardless;
- ``opportunistic`` → spot only: it waits when no spot is usable or affordable;
- ``normal`` without a deadline → both, the ranking decides (the hazard term
  makes spot pay for its expected interruptions);
- a job with a ``deadline`` → the slack-reserve policy of ``deadline_market``
  (greedy spot use in every allowed zone, never giving up the slack a reclaim
  and a return to spot need; after Can't Be Late, Wu et al., NSDI'24).

Budgets are spend-rate caps in USD/hour, global and per tenant. Spend is the
price of every live instance (they bill until gone) plus every launch in the
plan; a tenant's spend is its jobs' share of the instances they occupy (GPUs
used / GPUs of the instance), and a launch is charged in full to the tenant it
was bought for (conservative: the idle remainder counts against them until
someone else fills it). Lower-priority work is planned later, so it is what
waits when a cap is reached.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Job, JobState, checkpoint_share
from spotfleet.model.notice import SPOT_NOTICE_SECONDS, spot_notice_seconds
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Budget
from spotfleet.model.spec import JobSpec, Priority
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.shape import MIG_SLICES_PER_GPU
from spotfleet.policies.slack import SlackOutlook, covers_outages

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
    spot_available: bool | None = None,
    spot_hazard_per_h: float = 0.0,
    spot_refused: str | None = None,
    slack: SlackOutlook | None = None,
    providers: Iterable[str] = (),
) -> MarketDecision:
    """Which markets ``job`` may use now (the module docstring). ``providers``:
    the clouds whose spot the job may be reclaimed on (``notice_checkpoint_fits``)."""
    spec = job.spec
    if spec.priority is Priority.CRITICAL:
        return MarketDecision(ON_DEMAND_ONLY, "critical jobs run on on-demand", urgent=True)
    if not spec.is_interruptible:
        return MarketDecision(ON_DEMAND_ONLY, "non-interruptible jobs run on on-demand (spot can be reclaimed)")
    if spec.priority is Priority.OPPORTUNISTIC:
        return MarketDecision(SPOT_ONLY, "opportunistic jobs run on spot only (wait for cheap capacity)")
    if spec.deadline is not None:
        return deadline_market(job, now=now, expected_hours=expected_hours, knobs=knobs, last_market=last_market,
                               spot_available=spot_available, spot_hazard_per_h=spot_hazard_per_h,
                               spot_refused=spot_refused, slack=slack, providers=providers)  # fmt: skip
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


@dataclass(frozen=True, slots=True)
class DeadlineThresholds:
    """Slack levels (hours) that drive a deadline job's market; see ``deadline_market``.

    ``slack`` is the time left before the deadline minus the work left: how
    many hours the job may still spend not making progress. With ``d`` the
    restart delay, ``lost`` the work an unplanned interruption may throw away
    (the checkpoint interval; everything done when the job does not checkpoint)
    and ``m`` the margin (decision granularity):

    - ``reserve = d + lost + m``: what a job *on spot* must keep — if it is
      reclaimed now it loses ``lost``, then restarts on on-demand (``d``).
      ``lost`` is 0 when the job saves a checkpoint within the reclaim notice
      of every cloud it may be on (``notice_checkpoint_fits``), else the
      checkpoint interval (everything done, without one);
    - ``start = d + reserve``: what starting (or returning to) spot needs — its
      own restart, then the reserve;
    - ``back = start + m``: a job running on on-demand moves back to spot only
      with this much (the band ``m`` is the hysteresis: the move costs ``d``
      of slack, so a job can never bounce straight back);
    - ``wait = back + d + m``: an idle job waits for spot only above this, so
      that when it must fall back to on-demand (paying ``d``, decided up to
      ``m`` late) it still holds ``back`` and can return to spot when spot
      comes back.
    """

    slack: float
    restart: float
    lost: float
    margin: float

    @property
    def reserve(self) -> float:
        return self.restart + self.lost + self.margin

    @property
    def start(self) -> float:
        return self.restart + self.reserve

    @property
    def back(self) -> float:
        return self.start + self.margin

    @property
    def wait(self) -> float:
        return self.back + self.restart + self.margin


def deadline_thresholds(
    job: Job, *, now: datetime, expected_hours: float, knobs: Knobs, providers: Iterable[str] = ()
) -> DeadlineThresholds:
    """The job's slack levels now. ``providers``: the clouds whose spot it may be
    reclaimed on (its instance's when it runs on spot), for ``lost``."""
    spec = job.spec
    assert spec.deadline is not None
    done = progress_hours(job, expected_hours)
    left = (spec.deadline - now).total_seconds() / 3600.0
    interval = spec.checkpoint.interval
    lost = interval.total_seconds() / 3600.0 if interval is not None else done
    if notice_checkpoint_fits(spec, providers, knobs):
        lost = 0.0  # the drain protocol checkpoints within the notice: a reclaim costs the restart only
    return DeadlineThresholds(
        left - max(0.0, expected_hours - done), knobs.restart_delay_h, lost, deadline_margin(knobs)
    )


def notice_checkpoint_fits(spec: JobSpec | None, providers: Iterable[str], knobs: Knobs) -> bool:
    """Does the job save its checkpoint within the reclaim notice of every cloud
    in ``providers`` (none given: of the shortest notice known)?

    Then a reclaim costs a restart; otherwise it also throws away the work
    since the last periodic checkpoint, which deadline jobs must keep in
    reserve. Derived from ``checkpoint.duration`` against each cloud's notice
    (``spotfleet/model/notice.py``: AWS 120 s, GCP 30 s); a job that does not
    say how long it takes is assumed to fit (the drain protocol asks for the
    checkpoint the moment the notice arrives), and so is a caller with no spec
    to derive it from. ``Knobs.trust_notice_checkpoint`` True or False
    overrides the derivation for every job, spec or none.

    Why derived: a 60 s checkpoint fits AWS's notice and not GCP's, so one
    constant is either wasteful on AWS or late on GCP (a 60 s checkpoint on GCP
    missed 1 deadline of 30 with the old constant; docs/simulator.md)."""
    if knobs.trust_notice_checkpoint is not None:
        return knobs.trust_notice_checkpoint
    took = spec.checkpoint.duration if spec is not None else None
    if took is None:
        return True
    notices = [spot_notice_seconds(p) for p in providers] or [min(SPOT_NOTICE_SECONDS.values())]
    return took.total_seconds() <= min(notices)


def deadline_margin(knobs: Knobs) -> float:
    """The margin ``m``: the knob when set, else how late a move can land — two
    controller steps (``decision_interval_h``): the rule fires at the first step
    whose slack is below its level, up to a step after the slack crossed it,
    and the move it orders lands a step later (drained in one step, bound and
    restarting in the next) — capped at one restart delay (the earlier fixed
    margin, kept for coarse steps: a step of half an hour would otherwise eat
    most of a small slack); with no interval known, one restart delay.

    Design choice: one step was the margin until a held-out market with 32 s
    steps (``aws-v100-preemption-2023-04``) made a job miss its deadline by
    8 s of work. It left spot with its slack just under ``d + m``, one step before
    the slack fell below ``d``, and the move's second step and the restart
    took the rest."""
    if knobs.deadline_margin_h is not None:
        return knobs.deadline_margin_h
    if knobs.decision_interval_h is not None:
        return min(2 * knobs.decision_interval_h, knobs.restart_delay_h)
    return knobs.restart_delay_h


@dataclass(frozen=True, slots=True)
class SpotOffer:
    """The best usable spot offering for a job and the best on-demand one, as the
    deadline rule compares them: price (USD/instance-hour, per node of the shape
    over throughput when the caller has it: any common unit) and the spot pool's
    interruption hazard (per hour, learned online: ``forecast.Forecast.hazard``)."""

    spot_price: float
    hazard_per_h: float
    on_demand_price: float | None = None


def useful_fraction(hazard_per_h: float, restart_h: float, lost_h: float = 0.0) -> float:
    """Share of paid spot time that is useful progress.

    Spot lifetimes ``L`` are taken as exponential with rate ``λ`` (the pool's
    hazard). Each life first pays ``d`` (restart) and, when it ends, loses
    ``lost`` (work since the last checkpoint); what it contributes is
    ``max(0, L − d − lost)`` whose mean is ``e^{−λ(d+lost)}/λ`` against a mean
    life of ``1/λ``: the useful share is ``e^{−λ(d+lost)}``."""
    return math.exp(-max(0.0, hazard_per_h) * max(0.0, restart_h + lost_h))


def outlives_restart(hazard_per_h: float, restart_h: float) -> bool:
    """Does a spot pool's expected lifetime ``1/λ`` outlast a restart? A window
    that ends before the job has restarted buys no progress: such a pool is never
    entered, moved to, or counted as usable (the one place this rule lives)."""
    return hazard_per_h * restart_h < 1.0


def spot_cost_per_work(offer: SpotOffer, *, restart_h: float, lost_h: float = 0.0) -> float:
    """Expected spot cost per unit of useful work: price / useful share (the
    price plus the expected loss from reclaims)."""
    return offer.spot_price / useful_fraction(offer.hazard_per_h, restart_h, lost_h)


def spot_worth(offer: SpotOffer | None, *, restart_h: float, lost_h: float = 0.0) -> str | None:
    """Why the best spot offering is *not* worth taking for a deadline job, or None.

    - no usable spot offering;
    - its pool's expected lifetime ``1/λ`` is shorter than a restart ``d``: a
      window that ends before the job has restarted buys no progress;
    - its expected cost per unit of useful work (``spot_cost_per_work``) is not
      below on-demand's: reclaims would make it dearer than on-demand."""
    if offer is None:
        return "no usable spot offering"
    if not outlives_restart(offer.hazard_per_h, restart_h):
        return (f"spot's expected lifetime {1.0 / offer.hazard_per_h:.2f} h is shorter than a restart "
                f"({restart_h:.2f} h)")  # fmt: skip
    cost = spot_cost_per_work(offer, restart_h=restart_h, lost_h=lost_h)
    if offer.on_demand_price is not None and cost >= offer.on_demand_price:
        return (f"spot's expected cost per useful hour {cost:.3f} (price {offer.spot_price:.3f} with reclaims) "
                f"≥ on-demand {offer.on_demand_price:.3f}")  # fmt: skip
    return None


def deadline_market(
    job: Job,
    *,
    now: datetime,
    expected_hours: float | None,
    knobs: Knobs,
    last_market: Market | None = None,
    spot_available: bool | None = None,
    spot_hazard_per_h: float = 0.0,
    spot_refused: str | None = None,
    slack: SlackOutlook | None = None,
    providers: Iterable[str] = (),
) -> MarketDecision:
    """Slack-reserve deadline policy for a job that is not running (``DeadlineThresholds``).

    1. slack < ``start`` → on-demand: even one spot start could no longer
       survive a reclaim;
    2. spot offered now but not worth it (``spot_refused``, from ``spot_worth``:
       dearer per unit of useful work than on-demand once reclaims are
       priced in, or pools that do not outlive a restart) → on-demand, from
       which ``should_return_to_spot`` brings it back when spot is worth it;
       spot usable and worth it in any allowed zone now → spot (the ranking
       picks the pool with the least expected cost per unit of work);
    3. no spot now, slack < ``wait`` → wait for spot: a fallback to on-demand
       would be final (no slack left to come back), so waiting can only help
       until rule 1 fires;
    4. no spot now, *plenty* of slack — ``wait`` plus a round trip through
       on-demand (``2d``) for every reclaim the remaining work expects
       (``spot_hazard_per_h`` × work left) → wait for spot;
    5. otherwise *ski rental*: wait as long as a round trip through on-demand
       would cost (``2d`` of idle since the job was queued), then on-demand —
       from which ``should_return_to_spot`` brings it back when spot returns.
       Short outages are waited out; long ones cost on-demand instead of the
       slack later outages need.

    With a ``slack`` outlook (``policies/slack.py``: the learned market's
    reclaims and outages against the slack), rules 4 and 5 give way to it:
    on-demand now when the outage is expected to outlast a round trip
    through on-demand (``2d``) and the slack is more likely than not to run
    out waiting for spot (the hours are needed on-demand anyway; taken now,
    spot stays usable later instead of a final on-demand stretch); otherwise
    wait for spot.

    Safety: spot is entered only with ``start`` of slack, so after its restart
    the job holds ``reserve`` — enough for a reclaim (``lost``) plus an
    on-demand restart (``d``) with ``m`` to spare; idle, it leaves for
    on-demand before the slack falls below ``start``. On-demand never runs out
    (the one assumption), so no deadline is missed. ``spot_available``: whether
    a usable spot offering exists now (None: unknown → the ranking decides).
    ``last_market`` is accepted for callers' convenience; the decision does not
    depend on it. Unknown duration → on-demand: nothing can be promised.
    ``providers``: the clouds of the spot pools the job may start on (``lost``).
    """
    if job.spec.deadline is None or expected_hours is None:
        return MarketDecision(ON_DEMAND_ONLY, "deadline but no expected duration: on-demand", urgent=True)
    t = deadline_thresholds(job, now=now, expected_hours=expected_hours, knobs=knobs, providers=providers)
    if t.slack < t.start:
        return MarketDecision(
            ON_DEMAND_ONLY,
            f"deadline slack {t.slack:.2f} h no longer covers a spot start and a reclaim ({t.start:.2f} h): on-demand",
            urgent=True,
        )
    if spot_refused is not None:
        return MarketDecision(ON_DEMAND_ONLY, f"deadline slack {t.slack:.2f} h; {spot_refused}: on-demand "
                              "(back to spot when it is worth it)")  # fmt: skip
    if spot_available is True:
        return MarketDecision(SPOT_ONLY, f"deadline slack {t.slack:.2f} h: spot while available")
    if t.slack < t.wait:
        return MarketDecision(
            SPOT_ONLY, f"deadline slack {t.slack:.2f} h < {t.wait:.2f} h: on-demand would be final, wait for spot"
        )
    if slack is not None and spot_available is False:
        if covers_outages(slack.pressure, slack.outage_h, t.restart):
            return MarketDecision(ON_DEMAND_ONLY, f"deadline: no spot, outages last {slack.outage_h:.2f} h and the "
                                  f"{slack.describe()}: on-demand until spot returns")  # fmt: skip
        return MarketDecision(SPOT_ONLY, f"deadline: wait for spot, {slack.describe()}")
    remaining = max(0.0, expected_hours - progress_hours(job, expected_hours))
    plenty = t.wait + 2 * t.restart * spot_hazard_per_h * remaining
    if t.slack >= plenty:
        return MarketDecision(SPOT_ONLY, f"deadline slack {t.slack:.2f} h ≥ {plenty:.2f} h: wait for spot")
    idle = (now - job.state_since).total_seconds() / 3600.0 if job.state is JobState.PENDING else 0.0
    if idle < 2 * t.restart:
        return MarketDecision(
            SPOT_ONLY,
            f"deadline slack {t.slack:.2f} h, no spot now: waiting {idle:.2f} h of at most "
            f"{2 * t.restart:.2f} h (a round trip through on-demand) before on-demand",
        )
    if spot_available is None:
        return MarketDecision(EITHER, f"deadline slack {t.slack:.2f} h < {plenty:.2f} h: spot if any, else on-demand")
    return MarketDecision(
        ON_DEMAND_ONLY,
        f"deadline slack {t.slack:.2f} h < {plenty:.2f} h and no spot for {idle:.2f} h: on-demand until spot returns",
    )


def work_at_risk_hours(job: Job, expected_hours: float) -> float | None:
    """Hours of work a reclaim would throw away now: the progress since the
    checkpoint the job would resume from (``checkpoint_share`` of the reported
    step), or None when its reports cannot say (no step, or a checkpoint
    without one): then the caller assumes the whole interval."""
    share = checkpoint_share(job.progress, job.checkpoint)
    if share is None:
        return None
    return progress_hours(job, expected_hours) * (1.0 - share)


def has_progress(job: Job) -> bool:
    return isinstance(job.progress.get("fraction"), int | float) or isinstance(job.progress.get("done_s"), int | float)


def should_leave_spot(
    job: Job, *, now: datetime, expected_hours: float | None, knobs: Knobs, providers: Iterable[str] = ()
) -> str | None:
    """Why a RUNNING deadline job on spot should move to on-demand now, or None.

    Can't Be Late's argument: an unplanned interruption costs the restart
    delay *plus* the work since the last checkpoint; a planned move (checkpoint,
    then restart on on-demand) costs only the restart delay. So when the slack
    falls below the ``reserve`` (an interruption plus the margin) but still
    covers a restart, move now — later it would be too late either way. Only
    for jobs that report progress: without it the schedule cannot be judged
    and a running job is left alone. ``providers``: its instance's cloud.

    When the job's save does not fit the notice, what a reclaim throws away
    is the work since its last checkpoint (``work_at_risk_hours``), not the
    whole interval: right after a periodic save it is almost nothing. Leaving
    is judged on that; the margin ``m`` in the reserve covers its growth until
    the move lands (the rule is re-checked every step). Starting or returning
    to spot keeps the whole interval: the attempt's risk will reach it.
    """
    spec = job.spec
    if spec.deadline is None or expected_hours is None or not has_progress(job) or not spec.is_interruptible:
        return None
    t = deadline_thresholds(job, now=now, expected_hours=expected_hours, knobs=knobs, providers=providers)
    if t.lost > 0 and (risk := work_at_risk_hours(job, expected_hours)) is not None:
        t = replace(t, lost=min(t.lost, risk))
    if t.restart < t.slack < t.reserve:
        return (f"deadline: slack {t.slack:.2f} h no longer covers an interruption "
                f"({t.reserve:.2f} h with margin) but covers a planned move: to on-demand")  # fmt: skip
    return None


def should_return_to_spot(
    job: Job, *, now: datetime, expected_hours: float | None, knobs: Knobs, providers: Iterable[str] = ()
) -> str | None:
    """Why a RUNNING deadline job on on-demand should move back to spot now, or None.

    The caller checks that a usable spot offering exists. The move is planned
    (checkpoint, requeue, restart on spot: ``d`` of slack); it is made only
    when the slack is at least ``back`` = ``start + m``, so that after the move
    the job still holds the reserve for a reclaim and an on-demand restart,
    and the hysteresis band ``m`` keeps it from bouncing. On on-demand the
    slack stays constant, so the decision is stable until spot appears.
    ``providers``: the clouds of the spot pools it may return to.
    """
    spec = job.spec
    if spec.deadline is None or expected_hours is None or not has_progress(job) or not spec.is_interruptible:
        return None
    t = deadline_thresholds(job, now=now, expected_hours=expected_hours, knobs=knobs, providers=providers)
    if t.slack >= t.back:
        return f"deadline: slack {t.slack:.2f} h ≥ {t.back:.2f} h and spot is available: back to spot"
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
    reserved: float = 0.0  # held for urgent jobs waiting for budget that preemption frees
    tenant_reserved: dict[str, float] = field(default_factory=dict)
    holds: dict[str, tuple[str, float]] = field(default_factory=dict)  # job id → (tenant, USD/h held)

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
        if self.global_cap is not None and self.spend + self.reserved + price > self.global_cap + self.eps:
            return False
        cap = self.tenant_caps.get(tenant)
        held = self.tenant_reserved.get(tenant, 0.0)
        return cap is None or self.tenant_spend.get(tenant, 0.0) + held + price <= cap + self.eps

    def reserve(self, tenant: str, amount: float, *, job_id: str = "") -> None:
        """Hold ``amount`` USD/h for an urgent job blocked on budget: every
        launch planned after it sees that much less headroom. Design choice:
        without it, budget freed by preempting opportunistic work was re-bought
        by the victims (planned later in the same step, while the freed
        instances were still shutting down), and the urgent job never started
        (issue 14: a livelock of preempt → re-buy → preempt)."""
        if amount <= 0:
            return
        self.holds[job_id] = (tenant, amount)
        if self.global_cap is not None:
            self.reserved += amount
        if tenant in self.tenant_caps:
            self.tenant_reserved[tenant] = self.tenant_reserved.get(tenant, 0.0) + amount

    def launch(self, tenant: str, price: float) -> None:
        self.spend += price
        self.tenant_spend[tenant] = self.tenant_spend.get(tenant, 0.0) + price

    def can_use(self, tenant: str, cost: float) -> bool:
        cap = self.tenant_caps.get(tenant)
        return cap is None or cost <= 0 or self.tenant_spend.get(tenant, 0.0) + cost <= cap + self.eps

    def use(self, tenant: str, cost: float) -> None:
        if cost > 0:
            self.tenant_spend[tenant] = self.tenant_spend.get(tenant, 0.0) + cost

    def headroom(self, tenant: str, *, for_job: str | None = None) -> float:
        """USD/h this tenant may still add (inf without caps), after what is
        held for urgent jobs — with ``for_job``, only the holds of jobs planned
        before it (its own and later ones do not count against it: otherwise
        two urgent jobs would each see the other's hold and neither would ever
        preempt enough)."""
        before: list[tuple[str, float]] = []
        for job_id, hold in self.holds.items():
            if job_id == for_job:
                break
            before.append(hold)
        if for_job is None or for_job not in self.holds:
            before = list(self.holds.values())
        room = float("inf")
        if self.global_cap is not None:
            room = self.global_cap - self.spend - sum(a for _, a in before)
        cap = self.tenant_caps.get(tenant)
        if cap is not None:
            held = sum(a for t, a in before if t == tenant)
            room = min(room, cap - self.tenant_spend.get(tenant, 0.0) - held)
        return room
