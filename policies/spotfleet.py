"""``SpotfleetPolicy``: selection, market, placement, preemption and scale-down composed.

One ``decide(snapshot)`` call, in order:

1. forecasts from the snapshot's history (``forecast.py``);
2. a demand per PENDING job (and a *virtual* one per DRAINING job or job on
   an instance with a notice, which holds existing room or buys a replacement
   reserved for it — ``Launch.reserved_for``), each with its shape, market decision
   (``market.py``) and cost inputs (``selection.py``);
3. demands grouped by (shape, markets, economics) and planned group by group,
   critical → deadline → normal → opportunistic, oldest first, by
   ``placement.Placer`` against the live budget ledger;
4. planned moves of running deadline jobs: off spot when their slack covers
   a restart but no longer a reclaim (``market.should_leave_spot``), back to
   spot from on-demand when spot is available and the slack covers the move
   plus a reclaim (``market.should_return_to_spot``), and *migrations*: a
   job on spot moves to another pool's spot when the expected saving over its
   remaining work (bounded by that pool's expected lifetime) beats the
   move's cost and the gap has already cost the job as much as the move
   (ski rental, ``migration_gain``; at most ``Knobs.max_migrations_per_plan``
   per plan); then preemption for urgent jobs that could be neither placed
   nor bought;
5. scale-down methods (emptiness → consolidation) on what is left.

Commands come out in the order the executor should apply them: launches,
binds, preemptions/drains, then scale-down. The plan is deterministic for a
given snapshot and id source: new instance ids come from
``snapshot.new_id`` (sequential in tests and the simulator) and skip ids
already present.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import ACTIVE_JOB_STATES, Job, JobState
from spotfleet.model.offering import Market, Offering
from spotfleet.model.snapshot import Command, Drain, PoolAvailability, Preempt, Snapshot
from spotfleet.model.spec import JobSpec, Priority
from spotfleet.policies import preemption
from spotfleet.policies.forecast import Forecast, SpotSupply
from spotfleet.policies.knobs import DEFAULT_KNOBS, Knobs
from spotfleet.policies.market import (
    ON_DEMAND_ONLY,
    SPOT_ONLY,
    BudgetLedger,
    MarketDecision,
    SpotOffer,
    deadline_thresholds,
    decide_market,
    has_progress,
    notice_checkpoint_fits,
    outlives_restart,
    progress_hours,
    should_leave_spot,
    should_return_to_spot,
    spot_cost_per_work,
    spot_worth,
)
from spotfleet.policies.placement import Demand, Fleet, Outcome, Placer, id_generator
from spotfleet.policies.scaledown import DEFAULT_METHODS, Method, ScaleDownContext, scale_down
from spotfleet.policies.selection import (
    Economics,
    OfferingIndex,
    checkpoint_location,
    economics_of,
    move_rate_per_gib,
)
from spotfleet.policies.shape import Shape, shape_of
from spotfleet.policies.slack import SlackOutlook, cheaper_pool_wait, outlook, return_to_spot_pays


@dataclass(slots=True)
class PlanResult:
    """The commands plus what ``explain`` needs to say why."""

    commands: list[Command]
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    markets: dict[str, MarketDecision] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    scale_down_method: str = ""
    index: OfferingIndex | None = None
    forecast: Forecast | None = None


def tier(job: Job) -> int:
    """Planning order: critical, deadline, normal, opportunistic."""
    p = job.spec.priority
    if p is Priority.CRITICAL:
        return 0
    if p is Priority.OPPORTUNISTIC:
        return 3
    return 1 if job.spec.deadline is not None else 2


class SpotfleetPolicy:
    """The default policy: cost per unit of useful work, never late, within budget."""

    name = "spotfleet"

    def __init__(self, knobs: Knobs = DEFAULT_KNOBS, *, methods: Sequence[Method] = DEFAULT_METHODS) -> None:
        self.knobs = knobs
        self.methods = tuple(methods)

    def decide(self, snapshot: Snapshot) -> list[Command]:
        return self.plan(snapshot).commands

    def _deadline_moves(
        self, snapshot: Snapshot, forecast: Forecast, index: OfferingIndex, fleet: Fleet, result: PlanResult
    ) -> list[Command]:
        """Planned market moves of RUNNING deadline jobs (``market.should_leave_spot``
        and ``market.should_return_to_spot``): off spot when the slack no longer
        covers a reclaim, back to spot from on-demand when spot is available and
        the slack covers the move plus a reclaim. Each is a checkpoint drain
        (``_move``); no replacement is reserved, so the requeued job is placed
        by the market rule that asked for the move."""
        out: list[Command] = []
        migrations = 0
        for job in snapshot.jobs.values():
            if job.state is not JobState.RUNNING or job.spec.deadline is None or job.cancel_requested:
                continue
            if _threatened(job, snapshot):
                continue
            market = _last_market(job, snapshot)
            hours = _known_hours(job.spec, forecast)
            why: str | None = None
            if market is Market.SPOT:
                why = should_leave_spot(job, now=snapshot.now, expected_hours=hours, knobs=self.knobs,
                                        providers=_providers_of(job, snapshot))  # fmt: skip
                if why is None and migrations < self.knobs.max_migrations_per_plan:
                    why = self._migration(job, snapshot, forecast, index, fleet, hours)
                    migrations += why is not None
            elif market is Market.ON_DEMAND and index.classes(shape_of(job.spec, forecast), SPOT_ONLY):
                econ = economics_of(job, forecast, self.knobs)
                shape = shape_of(job.spec, forecast)
                slack = self.slack_outlook(job, shape, index, forecast, now=snapshot.now, idle_without_spot=False)
                if self._spot_worth(index, shape, econ, {}, slack, job.spec) is None:
                    why = should_return_to_spot(job, now=snapshot.now, expected_hours=hours, knobs=self.knobs,
                                                providers=_spot_providers(index, shape))  # fmt: skip
                    if why is not None:
                        why = self._return_pays(job, shape, index, forecast, hours, why, now=snapshot.now)
            if why is not None:
                out.extend(_move(job, snapshot, fleet, why))
                result.notes[job.id] = why
        return out

    def _spot_worth(
        self,
        index: OfferingIndex,
        shape: Shape,
        econ: Economics,
        cache: dict[tuple[Any, ...], str | None],
        slack: SlackOutlook | None = None,
        spec: JobSpec | None = None,
    ) -> str | None:
        """Why spot is not worth taking for a deadline job of this shape now, or
        None (``market.spot_worth``): the spot offering class with the least
        expected cost per unit of table work (its cheapest usable member, its
        ``selection.pool_reclaim_rate``) against the best on-demand class. With a ``slack``
        outlook each expected reclaim also spends slack (``reclaim_slack_h`` at
        ``value_per_h``, ``policies/slack.py``), added to the spot price: when
        the slack is short and the pools flap, spot's restarts cost more than
        on-demand's premium. Reads the cached offering classes only (no
        ranking): ``plan_scale`` stays flat. A reclaim also loses the work since
        the last checkpoint (``econ.lost_work_h``) in a class whose cloud's
        notice is too short for the job's checkpoint (``notice_checkpoint_fits``;
        ``spec`` None: the knob, unset = it fits)."""
        # per node-hour: a gang of n nodes is reclaimed at n × the pool's hazard, each reclaim spending the
        # whole job's slack, so a node-hour bears hazard × the job's price of one reclaim
        per_reclaim = slack.reclaim_slack_h * slack.value_per_h if slack else 0.0
        took = spec.checkpoint.duration if spec is not None else None
        key = (shape, econ.lost_work_h, took, round(per_reclaim, 4))
        if key in cache:
            return cache[key]
        d = self.knobs.restart_delay_h
        offer: SpotOffer | None = None
        best = float("inf")
        for c in index.classes(shape, SPOT_ONLY):
            if not (c.per and c.speed):
                continue
            price = (c.members[0].price_per_hour + c.hazard * per_reclaim) / (c.per * c.speed)
            candidate = SpotOffer(price, c.hazard * shape.nodes)
            fits = notice_checkpoint_fits(spec, (c.members[0].provider,), self.knobs)
            lost = 0.0 if fits else econ.lost_work_h
            cost = spot_cost_per_work(candidate, restart_h=d, lost_h=lost)
            if cost < best:
                best, offer = cost, candidate
        if offer is not None:
            od = min(
                (c.members[0].price_per_hour / (c.per * c.speed) for c in index.classes(shape, ON_DEMAND_ONLY)
                 if c.per and c.speed),
                default=None,
            )  # fmt: skip
            offer = SpotOffer(offer.spot_price, offer.hazard_per_h, od)
        why = cache[key] = spot_worth(offer, restart_h=d, lost_h=lost)
        if why is not None and slack is not None and per_reclaim > 0:
            why = f"{why} (reclaims priced with the slack they spend: {slack.describe()})"
            cache[key] = why
        return why

    def _migration(
        self,
        job: Job,
        snapshot: Snapshot,
        forecast: Forecast,
        index: OfferingIndex,
        fleet: Fleet,
        hours: float | None,
    ) -> str | None:
        """Why a RUNNING deadline job on spot should move to a cheaper spot pool now, or None.

        Only a job alone on its instances (a shared box is rightsizing's
        business) whose slack still covers the move and a reclaim after it."""
        if hours is None or not has_progress(job) or not job.bindings:
            return None
        caps = [fleet.caps.get(b.instance_id) for b in job.bindings]
        if any(c is None or not c.drainable or any(j.id != job.id for j in c.jobs) for c in caps):
            return None
        inst = snapshot.instances.get(job.bindings[0].instance_id)
        if inst is None or inst.state is not InstanceState.RUNNING:
            return None
        shape = shape_of(job.spec, forecast)
        t = deadline_thresholds(job, now=snapshot.now, expected_hours=hours, knobs=self.knobs,
                                providers=_spot_providers(index, shape))  # fmt: skip
        if t.slack - t.restart < t.start:
            return None  # the move would leave too little slack to survive a reclaim after it
        econ = economics_of(job, forecast, self.knobs)
        ranked = index.ranked(shape, SPOT_ONLY, econ, group=1)
        if not len(ranked):
            return None
        best = ranked[0]
        if best.offering.key == inst.offering.key:
            return None
        current = _offering_now(snapshot, inst.offering.key)
        if current is None:
            return None  # the pool is gone from the offerings: the reclaim path handles it
        remaining = max(0.0, hours - progress_hours(job, hours))
        slack = self.slack_outlook(job, shape, index, forecast, now=snapshot.now, idle_without_spot=False,
                                    hazard=index.hazard_of(current) * shape.nodes)  # fmt: skip
        egress = checkpoint_egress(job, current, best.offering, self.knobs)
        gain = migration_gain(
            current_price=current.price_per_hour * shape.nodes,
            current_hazard=index.hazard_of(current) * shape.nodes,
            new_price=best.offering.price_per_hour * shape.nodes,
            new_hazard=index.hazard_of(best.offering) * shape.nodes,
            remaining_h=remaining,
            restart_h=t.restart,
            slack_value_per_h=slack.value_per_h if slack else 0.0,
            reclaim_slack_h=slack.reclaim_slack_h if slack else t.restart,
            egress_usd=egress,
            forgone_h=_forgone_h(inst, forecast.availability.get(best.offering.key), snapshot.now),
        )
        if gain is None:
            return None
        saving, cost = gain
        return (
            f"migrate: {best.offering.zone} spot ${best.offering.price_per_hour:.2f}/h vs "
            f"{inst.offering.zone} ${current.price_per_hour:.2f}/h saves ${saving:.2f} over the remaining "
            f"{remaining:.1f} h (move costs ${cost:.2f}: restart, slack at ${slack.value_per_h if slack else 0:.2f}/h, "
            f"egress ${egress:.2f})"
        )

    def _cheaper_pool_wait(
        self,
        job: Job,
        shape: Shape,
        index: OfferingIndex,
        forecast: Forecast,
        pools: CheaperPools,
        market: SlackOutlook | None,
        *,
        now: datetime,
    ) -> str | None:
        """Why an idle deadline job should leave the spot pool that is up and wait
        for cheaper pools of the same instance type that are down now, or None.

        The choice the market rule does not see: it takes spot "while
        available" in any pool, so when the cheap zones are out and a dear one
        is up (a zone at 70 % of on-demand, always up, next to four at 15-20 %)
        a job bridges every outage there and then moves back, paying the gap
        and two restarts. Scored by ``slack.cheaper_pool_wait``: the cheaper
        pools' expected return (the first of them, each an exponential with its
        observed mean down run) in slack, against the gap over that wait plus
        the dear pool's restart. An hour of slack is priced by the dearer of
        two outlooks: waiting for the cheaper pools (their joint supply, and
        on-demand's premium over them, as once the slack binds the rest runs on
        on-demand) and the job's outlook on the whole market.

        - *Cheaper* is per useful hour (``market.spot_cost_per_work``: the price
          over the share a pool's reclaims leave useful, its hazard the larger
          of the learned one and one over its mean up run), not the price: a
          zone 20 % cheaper that flaps is not worth waiting for.
        - The gap over the wait must pay a restart in the dear pool. A smaller
          gap would not move the job back from the dear pool either
          (``migration_gain``'s ski rental), so waiting buys only a gap that
          small against slack whose price the outlook gets most wrong late in
          a flapping run. Without this guard the rule made the GCP
          development set dearer (1.057 → 1.065, the worst subset 1.189 →
          1.226): jobs waited for zones $2-4/h cheaper, met flapping pools, and
          ended on on-demand (docs/simulator.md, "Waiting for a cheaper pool").
        - Only with ``wait`` of slack (``DeadlineThresholds``): below it the
          rules of an idle job apply unchanged. Every step decides afresh.
        - Same instance type only: its zones differ in price and supply, not
          in speed or fit."""
        hours = _known_hours(job.spec, forecast)
        if hours is None:
            return None
        d = self.knobs.restart_delay_h
        up, per_job, wait_h, gap = pools.up, pools.per_job, pools.wait_h, pools.gap
        if gap * max(0.0, wait_h - d) < d * up.price_per_hour * per_job:
            return None  # the gap over the wait does not pay a restart in the dear pool (docstring)
        t = deadline_thresholds(job, now=now, expected_hours=hours, knobs=self.knobs,
                                providers=_spot_providers(index, shape))  # fmt: skip
        if t.slack < t.wait:
            return None
        view = _market_view(index, shape)
        if view is None:
            return None
        waiting = outlook(
            spendable_h=t.slack - t.start,
            work_left_h=max(0.0, hours - progress_hours(job, hours)),
            hazard_per_h=pools.hazard * shape.nodes,
            supply=pools.supply,
            restart_h=d,
            premium_per_h=max(0.0, view.on_demand_price * shape.nodes - pools.cost),
            idle_without_spot=True,
            wait_h=wait_h,
        )
        # the dearer of two readings of an hour of slack: the wait's own outlook (the cheaper pools'
        # supply) and the job's outlook on the whole market, the one the market rule read (``market``;
        # None for a job on a reclaimed instance, whose outlook the plan does not work out)
        if market is None:
            market = self.slack_outlook(job, shape, index, forecast, now=now, idle_without_spot=False)
        value = max(waiting.value_per_h, market.value_per_h if market is not None else 0.0)
        wait_cost, take_cost = cheaper_pool_wait(slack_value_per_h=value, wait_h=wait_h, restart_h=d,
                                                 gap_per_h=gap, up_price_per_h=up.price_per_hour * per_job)  # fmt: skip
        if wait_cost >= take_cost:
            return None
        return (f"deadline: wait for cheaper spot — {pools.count} pool(s) down now at ${pools.cost:.2f} per useful "
                f"hour, expected back in {wait_h:.2f} h; {up.zone} is up at ${pools.cost + gap:.2f}; waiting costs "
                f"${wait_cost:.2f} of slack against ${take_cost:.2f} (the gap and a restart); {waiting.describe()}")  # fmt: skip

    def slack_outlook(
        self,
        job: Job,
        shape: Shape,
        index: OfferingIndex,
        forecast: Forecast,
        *,
        now: datetime,
        idle_without_spot: bool,
        hazard: float | None = None,
    ) -> SlackOutlook | None:
        """The job's slack outlook (``policies/slack.py``) on the spot market its
        shape can use: the cheapest usable spot pool's hazard (or ``hazard``),
        the best-supplied market of its instance types, and the on-demand
        premium over spot for its nodes. None without a duration or a market."""
        hours = _known_hours(job.spec, forecast)
        view = _market_view(index, shape)
        if hours is None or view is None or job.spec.deadline is None:
            return None
        t = deadline_thresholds(job, now=now, expected_hours=hours, knobs=self.knobs, providers=view.spot_providers)
        return outlook(
            spendable_h=t.slack - t.start,
            work_left_h=max(0.0, hours - progress_hours(job, hours)),
            hazard_per_h=view.long_run_hazard * shape.nodes if hazard is None else hazard,
            supply=view.supply,
            restart_h=t.restart,
            premium_per_h=max(0.0, view.on_demand_price - view.spot_price) * shape.nodes,
            idle_without_spot=idle_without_spot,
        )

    def _return_pays(
        self,
        job: Job,
        shape: Shape,
        index: OfferingIndex,
        forecast: Forecast,
        hours: float | None,
        why: str,
        *,
        now: datetime,
    ) -> str | None:
        """``why`` (a move back to spot) when it pays for its restarts and the
        slack they spend (``slack.return_to_spot_pays``), else None."""
        slack = self.slack_outlook(job, shape, index, forecast, now=now, idle_without_spot=False)
        view = _market_view(index, shape)
        if slack is None or view is None or hours is None:
            return why
        gain, cost = return_to_spot_pays(
            slack, premium_per_h=max(0.0, view.on_demand_price - view.spot_price) * shape.nodes,
            spot_price=view.spot_price * shape.nodes, hazard_per_h=view.hazard * shape.nodes,
            work_left_h=max(0.0, hours - progress_hours(job, hours)), restart_h=self.knobs.restart_delay_h,
        )  # fmt: skip
        if gain <= cost:
            return None
        if slack.pressure >= 0.5 and slack.reclaim_cost_h >= 2 * self.knobs.restart_delay_h:
            pace = slack_pace(job, now=now, expected_hours=hours, ahead_h=2 * self.knobs.restart_delay_h)
            if pace is not None and pace < 0:
                return None  # the slack will run out: stay until ahead of an even spending of it
        return f"{why} (saves ${gain:.2f} against ${cost:.2f} of restarts and slack)"

    # ------------------------------------------------------------------
    def plan(self, snapshot: Snapshot) -> PlanResult:
        knobs, now = self.knobs, snapshot.now
        forecast = Forecast.from_history(snapshot.runs, snapshot.exposure, snapshot.availability,
                                         prior_per_hour=knobs.hazard_prior_per_h)  # fmt: skip
        index = OfferingIndex(
            snapshot.offerings, forecast=forecast, unavailable=snapshot.unavailable, now=now, knobs=knobs
        )
        jobs = snapshot.jobs
        fleet = Fleet.build(snapshot.instances.values(), jobs)
        ledger = BudgetLedger.build(snapshot.budgets, snapshot.instances.values(), jobs.values())
        result = PlanResult(commands=[], index=index, forecast=forecast)

        shapes: dict[tuple[Any, ...], Shape] = {}
        econs: dict[tuple[Any, ...], Economics] = {}
        groups: dict[tuple[Any, ...], list[Demand]] = {}
        spot_hazard: float | None = None  # the least interruption rate of any spot pool (deadline jobs)
        worth: dict[tuple[Any, ...], str | None] = {}
        # A backlog is mostly copies of a few specs (a batch submission shares one
        # ``JobSpec``): what depends on the spec alone is worked out once per spec
        # object — its shape, economics and hours, and for a job without a deadline
        # its market and its group (``decide_market`` reads only the spec then).
        per_spec: dict[int, tuple[Shape, Economics, float | None]] = {}
        plain: dict[int, MarketDecision] = {}
        plain_groups: dict[tuple[int, bool], list[Demand]] = {}
        waiting: dict[str, Outcome] = {}  # deadline jobs that wait for a cheaper spot pool (``_cheaper_pool_wait``)
        for job in jobs.values():
            # Only a notice (reclaim, rebalance) earns a replacement bought ahead: a drain the
            # policy asked for (a planned move, a preemption) requeues the job, which is then
            # placed by its market rule — never straight back where it was drained from.
            virtual = job.state in (JobState.DRAINING, JobState.RUNNING) and _threatened(job, snapshot)
            if job.state is not JobState.PENDING and not virtual:
                continue
            if job.cancel_requested:
                continue
            spec = job.spec
            memo = per_spec.get(id(spec))
            if memo is None:
                skey = _shape_key(spec, forecast)
                shape = shapes.get(skey)
                if shape is None:
                    shape = shapes[skey] = shape_of(spec, forecast)
                ekey = _econ_key(spec, forecast)
                econ = econs.get(ekey)
                if econ is None:
                    econ = econs[ekey] = economics_of(job, forecast, knobs, resume=False)
                memo = per_spec[id(spec)] = (shape, econ, _known_hours(spec, forecast))
            shape, spec_econ, hours = memo
            econ = spec_econ
            if checkpoint_location(job) is not None:
                # its own: where its checkpoint is prices the move. It still joins its spec's group
                # (one scan of the fleet for them all); buying splits a group by economics.
                econ = economics_of(job, forecast, knobs)
            if spec.deadline is None:
                decision = plain.get(id(spec))
                if decision is None:
                    decision = plain[id(spec)] = decide_market(job, now=now, expected_hours=hours, knobs=knobs)
                result.markets[job.id] = decision
                d = Demand(job, shape, decision.markets, econ, urgent=decision.urgent, virtual=virtual,
                           market_reason=decision.reason)  # fmt: skip
                members = plain_groups.get((id(spec), virtual))
                if members is None:
                    members = plain_groups[(id(spec), virtual)] = groups.setdefault(
                        (tier(job), not virtual, shape, decision.markets, spec_econ, decision.urgent), []
                    )
                members.append(d)
                continue
            spot_now: bool | None = None
            refused: str | None = None
            slack: SlackOutlook | None = None
            if spec.deadline is not None:
                classes = index.classes(shape, SPOT_ONLY)
                # spot counts as usable only where a pool outlives a restart (``outlives_restart``)
                spot_now = any(outlives_restart(c.hazard, knobs.restart_delay_h) for c in classes)
                if not virtual:
                    slack = self.slack_outlook(job, shape, index, forecast, now=now, idle_without_spot=not spot_now)
                if classes:
                    refused = self._spot_worth(index, shape, econ, worth, slack, spec)
                if spot_hazard is None:
                    spot_hazard = min((forecast.hazard(o) for o in snapshot.offerings if o.market is Market.SPOT),
                                      default=0.0)  # fmt: skip
            decision = decide_market(
                job,
                now=now,
                expected_hours=hours,
                knobs=knobs,
                last_market=_last_market(job, snapshot),
                spot_available=spot_now,
                spot_hazard_per_h=spot_hazard or 0.0,
                spot_refused=refused,
                # the outlook's outage rule is for the market being down, not for our own fleet
                # holding every slot of it (then the job waits for room like any other)
                slack=slack if spot_now or _market_down(index, shape) else None,
                providers=_spot_providers(index, shape),
            )
            if spot_now and decision.markets == SPOT_ONLY:
                pools = _cheaper_pools(index, forecast, shape, knobs.restart_delay_h)
                why_wait = (
                    None
                    if pools is None
                    else self._cheaper_pool_wait(job, shape, index, forecast, pools, slack, now=now)
                )
                if why_wait is not None:
                    result.markets[job.id] = MarketDecision((), why_wait)
                    waiting[job.id] = Outcome("blocked", "waiting", why_wait)
                    continue
            result.markets[job.id] = decision
            d = Demand(
                job,
                shape,
                decision.markets,
                econ,
                urgent=decision.urgent,
                virtual=virtual,
                market_reason=decision.reason,
            )
            key = (tier(job), not virtual, shape, decision.markets, spec_econ, decision.urgent)
            groups.setdefault(key, []).append(d)

        ordered = []
        for key, members in groups.items():
            members.sort(key=lambda d: (d.job.created_at, d.job.id))
            ordered.append(((key[0], key[1], members[0].job.created_at, members[0].job.id), members))
        ordered.sort(key=lambda t: t[0])

        placer = Placer(fleet, index, ledger, knobs, id_generator(snapshot.new_id, snapshot.instances),
                        avoid=snapshot.avoid)  # fmt: skip
        for _, members in ordered:
            placer.place_group(members)
            _hold_budget(members, placer, index, ledger, snapshot)
        result.outcomes = placer.outcomes
        result.outcomes.update(waiting)

        commands: list[Command] = [*placer.launches, *placer.binds]
        commands.extend(self._deadline_moves(snapshot, forecast, index, fleet, result))
        if knobs.preemption_enabled and placer.blocked:
            short: dict[str, float] = {}
            for d in placer.blocked:
                if d.urgent and placer.outcomes[d.job.id].code == "budget":
                    ranked = index.ranked(d.shape, d.markets, d.econ, group=1)
                    if ranked:
                        cheapest = min(ranked.price(j) for j in range(len(ranked))) * d.shape.nodes
                        short[d.job.id] = cheapest - ledger.headroom(d.tenant, for_job=d.job.id)
            pre, notes = preemption.preempt(
                placer.blocked,
                fleet=fleet,
                index=index,
                now=now,
                budget_short=short,
                max_jobs=knobs.preemption_max_jobs,
                per_job_per_hour=knobs.preemptions_per_job_per_hour,
            )
            commands.extend(pre)
            result.notes.update(notes)
        method, down = scale_down(ScaleDownContext(snapshot, fleet, index, forecast, knobs), self.methods)
        result.scale_down_method = method
        commands.extend(down)
        result.commands = commands
        return result


def migration_gain(
    *,
    current_price: float,
    current_hazard: float,
    new_price: float,
    new_hazard: float,
    remaining_h: float,
    restart_h: float,
    forgone_h: float,
    slack_value_per_h: float = 0.0,
    reclaim_slack_h: float | None = None,
    egress_usd: float = 0.0,
) -> tuple[float, float] | None:
    """(expected saving, move cost) when moving pays, else None.

    Effective price per useful hour is ``price · (1 + hazard · restart)``
    (each expected reclaim wastes a paid restart) plus ``hazard ·
    reclaim_slack_h · slack_value_per_h``: each expected reclaim also spends
    slack (``policies/slack.py``), so a flakier pool is dearer when the slack
    is tight. The saving is the gap over the remaining work, bounded by the
    new pool's expected lifetime ``1/hazard`` (after a reclaim the job is
    placed afresh anyway). The move costs a restart paid at the new price
    (the old instance is given back once the job has checkpointed), the
    restart's slack at ``slack_value_per_h``, and moving the checkpoint
    (``egress_usd``). A pool whose expected lifetime is shorter than a restart
    is never worth moving to. The move is made when both hold:

    - the expected saving beats the move's cost;
    - *ski rental*: the gap has already cost the job as much as the move,
      ``gap × forgone_h ≥ cost``, where ``forgone_h`` is how long it has paid
      the gap (``_forgone_h``: since the new pool's current available run
      began, or since the job's instance was launched if that is later).

    The second is the hysteresis, derived from the move's own cost rather
    than a factor: a large gap waits minutes, a small one hours, and a pool
    that came back a moment ago (in a flapping market, the pool that may be
    gone again in minutes) waits until it has stayed. Renting until the rent
    paid equals the price of buying never costs more than twice what the
    best choice in hindsight costs, however long the gap lasts; a move back
    needs the reversed gap to pay for itself the same way, so a job does not
    bounce.

    Design choice: it replaces "the saving must beat the cost twice over",
    which made moves late where a cheap zone came back and stayed (the
    probes cheaper-zone-returns and price-waves, docs/simulator.md); the
    factor alone at 1 made GCP jobs bounce to pools back for minutes. Both
    measured in docs/simulator.md, "Moving once the gap has paid for the move"."""
    per_reclaim = (restart_h if reclaim_slack_h is None else reclaim_slack_h) * slack_value_per_h
    eff_cur = current_price * (1.0 + current_hazard * restart_h) + current_hazard * per_reclaim
    eff_new = new_price * (1.0 + new_hazard * restart_h) + new_hazard * per_reclaim
    if eff_new >= eff_cur:
        return None
    if not outlives_restart(new_hazard, restart_h):
        return None
    lifetime = 1.0 / new_hazard if new_hazard > 0 else remaining_h
    horizon = min(remaining_h, lifetime)
    saving = (eff_cur - eff_new) * horizon
    cost = restart_h * (new_price + slack_value_per_h) + egress_usd
    if saving <= cost or (eff_cur - eff_new) * forgone_h < cost:
        return None
    return saving, cost


def _forgone_h(inst: Instance, seen: PoolAvailability | None, now: datetime) -> float:
    """Hours the job has paid the gap to a pool (``migration_gain``'s ski
    rental): since the pool's current available run began (``seen``, the
    availability log; 0 when the pool has not been watched or is down), or
    since the job's instance was launched if that is later. Prices' history
    is not kept, so a gap that opened by a price change within a run is
    counted from the run's start."""
    on = (now - (inst.launched_at or inst.created_at)).total_seconds() / 3600.0
    up = seen.up_for_h if seen is not None else 0.0
    return max(0.0, min(on, up))


_VIEWS: weakref.WeakKeyDictionary[OfferingIndex, dict[Shape, MarketView | None]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class MarketView:
    """A shape's spot market as the slack outlook reads it: the cheapest usable
    spot price (else the cheapest listed), the cheapest on-demand price, that
    spot pool's hazard now and on average, and the best supply among its
    instance types."""

    spot_price: float
    on_demand_price: float
    hazard: float  # of the pool's current run, given its age (``selection.pool_reclaim_rate``): for a move now
    supply: SpotSupply
    # for the slack outlook over the work left: the larger of ``hazard`` and one over the
    # pool's mean up run. ``hazard`` is the age-aware rate, so just after a blip this is
    # higher than the pool's average; the figures in docs/simulator.md are measured with it
    long_run_hazard: float = 0.0
    spot_providers: tuple[str, ...] = ()  # the clouds of its spot pools (``market.notice_checkpoint_fits``)


def _market_view(index: OfferingIndex, shape: Shape) -> MarketView | None:
    """The shape's ``MarketView`` (cached per index: one plan)."""
    cache = _VIEWS.setdefault(index, {})
    if shape in cache:
        return cache[shape]
    spot: list[Offering] = []
    od: list[Offering] = []
    for group in index.by_type.values():
        if index.type_rejection(shape, group[0]) is not None or shape.per_instance(group[0]) <= 0:
            continue
        for o in group:
            if not index.accepts(shape, o, (o.market,)):
                continue
            (spot if o.market is Market.SPOT else od).append(o)
    view: MarketView | None = None
    if spot and od:
        usable = [o for o in spot if index.usable(o)]
        cheapest = min(usable or spot, key=lambda o: o.price_per_hour)
        supply = max((index.forecast.market_supply(o) for o in spot), key=lambda s: s.availability)
        mean_up = index.forecast.pool_supply(cheapest).mean_up_h
        hazard = index.hazard_of(cheapest)
        long_run = max(hazard, 1.0 / mean_up if mean_up > 0 else 0.0)
        view = MarketView(cheapest.price_per_hour, min(o.price_per_hour for o in od), hazard, supply, long_run,
                          tuple(sorted({o.provider for o in spot})))  # fmt: skip
    cache[shape] = view
    return view


@dataclass(frozen=True, slots=True)
class CheaperPools:
    """Spot pools of a shape's best usable instance type that are down now and
    cheaper per useful hour than the best pool up (``_cheaper_pools``)."""

    up: Offering  # the best usable spot pool
    per_job: float  # instances of its type the job takes
    count: int  # cheaper pools down now
    wait_h: float  # expected wait for the first of them to come back
    cost: float  # their USD per useful hour of the job's work, weighted by how soon each returns
    gap: float  # the best pool up's USD per useful hour above ``cost``
    hazard: float  # their reclaim rate per instance, weighted alike
    supply: SpotSupply  # their joint supply: up when any is (independent shares), down runs of ``wait_h``


_CHEAPER: weakref.WeakKeyDictionary[OfferingIndex, dict[tuple[Shape, float], CheaperPools | None]] = (
    weakref.WeakKeyDictionary()
)


def joint_outage_factor(pools: int) -> float:
    """How much longer than independence says ``pools`` spot pools that are all
    down stay so, until the first of them is back: ``√pools``.

    A prior from the reference traces (``bench/joint_outages.py``): over every
    subset of k zones, the mean length of the outages with all k down at once,
    over the independent prediction ``1 / Σ 1/mean_down``, averaged over the
    subsets — GCP H100 1.32, 1.58, 1.84 and AWS V100 (2023-02) 1.33, 1.68, 2.00
    for k = 2, 3, 4; √k is 1.41, 1.73, 2.00. One zone is its own outage (1).
    Zones fail together (a cloud's capacity crunch spans regions), so the first
    zone back comes later than independent exponentials make it."""
    return math.sqrt(max(1, pools))


def _cheaper_pools(index: OfferingIndex, forecast: Forecast, shape: Shape, restart_h: float) -> CheaperPools | None:
    """The shape's ``CheaperPools``, or None when no cheaper pool is down (cached per index: one plan).

    A pool's cost per useful hour is ``market.spot_cost_per_work`` at its
    hazard: the class's for the pool up, for a pool down the larger of the
    learned one and one over its mean up run. Each down pool comes back after
    a down run of its observed mean; were they independent exponentials, the
    first of them would be back after ``1 / Σ 1/mean_down``, each with a
    chance in proportion to ``1/mean_down``. Zones of a cloud go down
    together, so the wait is that times ``joint_outage_factor(k)`` for ``k``
    pools (``√k``, from the reference traces)."""
    cache = _CHEAPER.setdefault(index, {})
    key = (shape, restart_h)
    if key in cache:
        return cache[key]
    d = restart_h

    def per_work(price: float, hazard: float, per: int) -> float:
        return spot_cost_per_work(SpotOffer(price * shape.nodes / per, hazard * shape.nodes), restart_h=d)

    found: CheaperPools | None = None
    usable = [c for c in index.classes(shape, SPOT_ONLY) if c.per and outlives_restart(c.hazard, d)]
    if usable:
        best = min(usable, key=lambda c: per_work(c.members[0].price_per_hour, c.hazard, c.per) / (c.speed or 1.0))
        up = best.members[0]
        up_cost = per_work(up.price_per_hour, best.hazard, best.per)
        down: list[tuple[SpotSupply, float, float]] = []  # supply, hazard, USD per useful hour
        for o in index.by_type.get((up.provider, up.instance_type), ()):
            if o.market is not Market.SPOT or index.usable(o) or not index.accepts(shape, o, SPOT_ONLY):
                continue
            supply = forecast.pool_supply(o)
            hazard = max(forecast.hazard(o), 1.0 / supply.mean_up_h if supply.mean_up_h > 0 else 0.0)
            cost = per_work(o.price_per_hour, hazard, best.per)
            if outlives_restart(hazard * shape.nodes, d) and cost < up_cost:
                down.append((supply, hazard, cost))
        if down:
            rates = [1.0 / max(supply.mean_down_h, 1e-6) for supply, _, _ in down]
            total = sum(rates)
            wait_h = joint_outage_factor(len(down)) / total
            cost = sum(r * c for r, (_, _, c) in zip(rates, down, strict=True)) / total
            hazard = sum(r * h for r, (_, h, _) in zip(rates, down, strict=True)) / total
            none_up = math.prod(1.0 - supply.availability for supply, _, _ in down)
            joint = SpotSupply(1.0 - none_up, down[0][0].mean_up_h, wait_h, up_now=False)
            found = CheaperPools(up, shape.nodes / best.per, len(down), wait_h, cost, up_cost - cost, hazard, joint)
    cache[key] = found
    return found


def _spot_providers(index: OfferingIndex, shape: Shape) -> tuple[str, ...]:
    """The clouds whose spot pools the shape may use (none: no market view)."""
    view = _market_view(index, shape)
    return view.spot_providers if view is not None else ()


def _providers_of(job: Job, snapshot: Snapshot) -> tuple[str, ...]:
    """The clouds of the instances ``job`` runs on."""
    found = {
        snapshot.instances[b.instance_id].offering.provider for b in job.bindings if b.instance_id in snapshot.instances
    }
    return tuple(sorted(found))


def _market_down(index: OfferingIndex, shape: Shape) -> bool:
    """Is the shape's spot market down — no zone of its instance types can be
    bought and none is held by our own instances (``AvailabilityLog``)?"""
    view = _market_view(index, shape)
    return view is not None and not view.supply.up_now


def slack_pace(job: Job, *, now: datetime, expected_hours: float, ahead_h: float = 0.0) -> float | None:
    """Slack the job holds above an even spending of its slack over its window
    (hours; negative: behind), ``ahead_h`` from now.

    With ``D`` the window (submission to deadline) and ``S₀ = D − work`` its
    slack at submission, an even spending leaves ``S₀ · (time left)/D`` — Can't
    Be Late's uniform-progress line written in slack. Used only when the slack
    is expected to run out (``SlackOutlook.pressure ≥ ½``): a job that came to
    on-demand then stays until it is ahead of that line, so it does not spend
    on flapping spot now the slack that later, longer runs need; with slack to
    spare the line plays no part (pacing a job that will not run short only
    buys on-demand it does not need)."""
    deadline = job.spec.deadline
    if deadline is None:
        return None
    window = (deadline - job.created_at).total_seconds() / 3600.0
    left = (deadline - now).total_seconds() / 3600.0
    if window <= 0:
        return None
    slack = left - max(0.0, expected_hours - progress_hours(job, expected_hours))
    return slack - (window - expected_hours) * max(0.0, left - ahead_h) / window


def checkpoint_egress(job: Job, current: Offering, new: Offering, knobs: Knobs) -> float:
    """USD to move the job's checkpoint (``spec.checkpoint.size_gib``) from
    ``current``'s region to ``new``'s (``selection.move_rate_per_gib``)."""
    size = job.spec.checkpoint.size_gib
    return size * move_rate_per_gib((current.provider, current.region), new, knobs) if size > 0 else 0.0


def _hold_budget(
    members: list[Demand], placer: Placer, index: OfferingIndex, ledger: BudgetLedger, snapshot: Snapshot
) -> None:
    """Hold budget for each urgent job of ``members`` that the budget blocked.

    The hold is its cheapest launch less what instances already draining for
    it will free (``Instance.reserved_for``): later (lower) tiers may only buy
    what leaves room for it once those are gone, so the victims of a budget
    preemption cannot re-buy what they were evicted from. Only a job whose
    launch fits under its caps at all holds anything; otherwise nothing it
    could ever use would be kept from others.
    """
    for d in members:
        outcome = placer.outcomes.get(d.job.id)
        if not d.urgent or d.virtual or outcome is None or outcome.code != "budget":
            continue
        ranked = index.ranked(d.shape, d.markets, d.econ, group=1)
        if not ranked:
            continue
        price = min(ranked.price(j) for j in range(len(ranked))) * d.shape.nodes
        caps = [c for c in (ledger.global_cap, ledger.tenant_caps.get(d.tenant)) if c is not None]
        if any(price > c + ledger.eps for c in caps):
            continue
        freed = sum(
            i.offering.price_per_hour
            for i in snapshot.instances.values()
            if i.reserved_for == d.job.id and i.state in (InstanceState.DRAINING, InstanceState.TERMINATING)
        )
        ledger.reserve(d.tenant, price - freed, job_id=d.job.id)


def _move(job: Job, snapshot: Snapshot, fleet: Fleet, why: str) -> list[Command]:
    """A planned move: checkpoint, requeue, restart where the market rule says.

    When the job is alone on its instances they are drained (and given back
    as soon as it has left: nothing else would use them); otherwise only the
    job is preempted. Either way no notice is set, so no replacement is
    reserved for it."""
    ids = sorted({b.instance_id for b in job.bindings})
    insts = [snapshot.instances.get(i) for i in ids]
    caps = {i: fleet.caps.get(i) for i in ids}  # the instance → jobs index (no scan of every job)
    alone = all(
        inst is not None
        and inst.state in (InstanceState.PROVISIONING, InstanceState.RUNNING)
        and (cap := caps[inst.id]) is not None
        and all(j.id == job.id for j in cap.jobs if j.state in ACTIVE_JOB_STATES)
        for inst in insts
    )
    if ids and alone:
        return [Drain(i, why) for i in ids]
    return [Preempt(job.id, why)]


def _offering_now(snapshot: Snapshot, key: str) -> Offering | None:
    """The pool's offering in this snapshot (today's price), whatever the instance was bought at."""
    for o in snapshot.offerings:
        if o.key == key:
            return o
    return None


def _threatened(job: Job, snapshot: Snapshot) -> bool:
    """Is the job on an instance with a notice (reclaim, rebalance, maintenance)?"""
    for b in job.bindings:
        inst = snapshot.instances.get(b.instance_id)
        if inst is not None and inst.notice_kind is not None:
            return True
    return False


def _known_hours(spec: JobSpec, forecast: Forecast) -> float | None:
    if spec.expected_duration is not None:
        return spec.expected_duration.total_seconds() / 3600.0
    predicted = forecast.duration_s(spec.job_family)
    return predicted / 3600.0 if predicted else None


def _last_market(job: Job, snapshot: Snapshot) -> Market | None:
    """The market the job last ran on: its binding's instance, else
    ``progress['market']`` (bindings are cleared when a job is requeued)."""
    for b in job.bindings:
        inst = snapshot.instances.get(b.instance_id)
        if inst is not None:
            return inst.market
    recorded = job.progress.get("market")
    return Market(recorded) if recorded in (Market.SPOT.value, Market.ON_DEMAND.value) else None


def _shape_key(spec: JobSpec, forecast: Forecast) -> tuple[Any, ...]:
    r = spec.resources
    family = spec.job_family if (r.gpu_memory_gib == 0 and spec.job_family in forecast.peak_memory_gib) else None
    return (
        r.gpus,
        tuple(r.gpu_types),
        r.gpu_memory_gib,
        r.mig,
        r.gpu_fraction,
        r.nodes,
        r.cpus,
        r.memory_gib,
        r.nvlink,
        r.interconnect,
        tuple(spec.regions),
        tuple(spec.providers),
        spec.max_price_per_hour,
        family,
    )


def _econ_key(spec: JobSpec, forecast: Forecast) -> tuple[Any, ...]:
    family = spec.job_family
    learned = family if family in forecast.throughput else None
    duration_family = family if spec.expected_duration is None and family in forecast.durations_s else None
    ds = spec.dataset
    return (
        spec.expected_duration,
        spec.checkpoint.interval,
        learned,
        duration_family,
        spec.throughput,
        ds.region if ds else None,
        ds.size_gib if ds else 0.0,
    )
