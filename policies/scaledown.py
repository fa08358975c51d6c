"""Scale-down: ordered, pluggable methods; the first that yields commands wins.

Like Karpenter's disruption controller (``NewMethods``), the default order is

1. ``Emptiness`` — a RUNNING instance with no jobs, idle for ``idle_ttl_s``
   (since ``Instance.idle_since``; unknown means not idle), that this
   plan did not just bind or reserve → ``Terminate``;
2. ``Consolidation`` — an under-used RUNNING instance whose jobs are all
   interruptible and fit in spare room elsewhere (same market rules) is
   drained when ``savings_per_hour / disruption_cost ≥ threshold`` (Karpenter's
   ``Balanced`` idea): savings = its price; disruption cost = for each job,
   (work since its last checkpoint + restart delay) × its share of the
   instance's price. Non-interruptible jobs are never moved, and at most a
   disruption budget of instances may be draining at once;
3. ``Replacement`` (rightsizing, Karpenter's "replace") — an under-used
   RUNNING instance with one interruptible single-node job is drained when a
   *cheaper new* offering fits that job (the best of the job's own ranking,
   same market rules) and ``savings_per_hour / disruption_cost ≥ threshold``
   (disruption = lost work + restart at the old price, plus a restart at the
   new one); the requeued job is then placed on the cheapest fit. Example:
   a 1-GPU job alone on a 4×A10G $2.08/h box moves to a $0.43/h 1-GPU box.

The list is injectable (``SpotfleetPolicy(methods=...)``); a method is any
callable taking a ``ScaleDownContext`` and returning commands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from spotfleet.model.instance import InstanceState
from spotfleet.model.job import JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Command, Drain, Snapshot, Terminate
from spotfleet.model.spec import Priority
from spotfleet.policies.capacity import Cap
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import EITHER, ON_DEMAND_ONLY, SPOT_ONLY, share_of
from spotfleet.policies.placement import Fleet
from spotfleet.policies.preemption import lost_work_s
from spotfleet.policies.selection import OfferingIndex, economics_of
from spotfleet.policies.shape import Shape, shape_of


@dataclass(slots=True)
class ScaleDownContext:
    snapshot: Snapshot
    fleet: Fleet
    index: OfferingIndex
    forecast: Forecast
    knobs: Knobs

    @property
    def now(self) -> datetime:
        return self.snapshot.now


Method = Callable[[ScaleDownContext], list[Command]]


def emptiness(ctx: ScaleDownContext) -> list[Command]:
    out: list[Command] = []
    for cap in ctx.fleet.caps.values():
        inst = ctx.snapshot.instances.get(cap.id)
        if inst is None or inst.state is not InstanceState.RUNNING or cap.jobs or cap.touched:
            continue
        if inst.idle_since is None or cap.reserved_for is not None:
            continue
        idle = (ctx.now - inst.idle_since).total_seconds()
        if idle >= ctx.knobs.idle_ttl_s:
            out.append(Terminate(cap.id, f"empty for {idle:.0f}s (idle TTL {ctx.knobs.idle_ttl_s:.0f}s)"))
    return out


def _markets_for_move(job_priority: Priority, has_deadline: bool, current: Market) -> tuple[Market, ...]:
    if job_priority is Priority.OPPORTUNISTIC:
        return SPOT_ONLY
    if job_priority is Priority.CRITICAL:
        return ON_DEMAND_ONLY
    return (current,) if has_deadline else EITHER


def consolidation(ctx: ScaleDownContext) -> list[Command]:
    knobs, fleet, now = ctx.knobs, ctx.fleet, ctx.now
    live = [i for i in ctx.snapshot.instances.values() if i.live]
    draining = sum(1 for i in live if i.state is InstanceState.DRAINING)
    allowed = max(knobs.disruption_budget_min, int(knobs.disruption_budget_fraction * len(live))) - draining
    if allowed <= 0:
        return []
    cands = _drainable_candidates(ctx)
    out: list[Command] = []
    leaving: set[str] = set()
    shadow: dict[str, Cap] = {}  # copy-on-write targets
    spare_cache: dict[tuple[Shape, tuple[Market, ...]], list[Cap]] = {}
    for cap in cands[: knobs.consolidation_max_candidates]:
        if len(out) >= allowed:
            break
        trial: dict[str, Cap] = {}
        ok = True
        cost = 0.0
        for job in cap.jobs:
            shape = shape_of(job.spec, ctx.forecast)
            if shape.nodes > 1:
                ok = False  # gangs move as a whole; not consolidated one node at a time
                break
            markets = _markets_for_move(job.spec.priority, job.spec.deadline is not None, cap.offering.market)
            key = (shape, markets)
            spare = spare_cache.get(key)
            if spare is None:
                spare = spare_cache[key] = fleet.candidates(shape, markets, ctx.index)
            target = None
            for other in spare:
                if other.id == cap.id or other.id in leaving:
                    continue
                view = trial.get(other.id) or shadow.get(other.id) or other
                if view.fits(shape):
                    target = view if other.id in trial else view.clone()
                    break
            if target is None:
                ok = False
                break
            target.take(shape)
            trial[target.id] = target
            inst = ctx.snapshot.instances[cap.id]
            lost_h = lost_work_s(job, now) / 3600.0 + knobs.restart_delay_h
            cost += lost_h * cap.offering.price_per_hour * share_of(job, inst)
        if not ok:
            continue
        savings = cap.offering.price_per_hour
        ratio = savings / cost if cost > 0 else float("inf")
        if ratio < knobs.consolidation_threshold_per_h:
            continue
        shadow.update(trial)
        leaving.add(cap.id)
        out.append(
            Drain(
                cap.id,
                f"consolidation: saves ${savings:.2f}/h for ${cost:.2f} of disruption; "
                f"{len(cap.jobs)} job(s) fit elsewhere",
            )
        )
    return out


def _drainable_candidates(ctx: ScaleDownContext) -> list[Cap]:
    out: list[Cap] = []
    for cap in ctx.fleet.caps.values():
        inst = ctx.snapshot.instances.get(cap.id)
        if inst is None or inst.state is not InstanceState.RUNNING or not cap.schedulable or cap.touched:
            continue
        if not cap.jobs or not cap.offering.gpu_count:
            continue
        if any(not j.spec.is_interruptible or j.state not in (JobState.RUNNING, JobState.BOUND) for j in cap.jobs):
            continue
        if cap.used_gpus / cap.offering.gpu_count > ctx.knobs.consolidation_max_utilization:
            continue
        out.append(cap)
    out.sort(key=lambda c: (-c.offering.price_per_hour, c.used_gpus, c.id))
    return out


def replacement(ctx: ScaleDownContext) -> list[Command]:
    """Rightsizing: drain an under-used instance whose one job fits a cheaper new offering."""
    knobs, now = ctx.knobs, ctx.now
    live = [i for i in ctx.snapshot.instances.values() if i.live]
    draining = sum(1 for i in live if i.state is InstanceState.DRAINING)
    allowed = max(knobs.disruption_budget_min, int(knobs.disruption_budget_fraction * len(live))) - draining
    out: list[Command] = []
    for cap in _drainable_candidates(ctx)[: knobs.consolidation_max_candidates]:
        if len(out) >= allowed:
            break
        if len(cap.jobs) != 1:
            continue
        (job,) = cap.jobs
        shape = shape_of(job.spec, ctx.forecast)
        if shape.nodes > 1:
            continue
        markets = _markets_for_move(job.spec.priority, job.spec.deadline is not None, cap.offering.market)
        ranked = ctx.index.ranked(shape, markets, economics_of(job, ctx.forecast, knobs), group=1)
        if not len(ranked):
            continue
        best = ranked[0].offering
        price = cap.offering.price_per_hour
        if best.price_per_hour >= price or best.key == cap.offering.key:
            continue
        savings = price - best.price_per_hour
        lost_h = lost_work_s(job, now) / 3600.0 + knobs.restart_delay_h
        cost = lost_h * price + knobs.restart_delay_h * best.price_per_hour
        if cost > 0 and savings / cost < knobs.consolidation_threshold_per_h:
            continue
        out.append(
            Drain(
                cap.id,
                f"replace: {best.instance_type} ${best.price_per_hour:.2f}/h fits {job.id} "
                f"(saves ${savings:.2f}/h for ${cost:.2f} of disruption)",
            )
        )
    return out


DEFAULT_METHODS: tuple[Method, ...] = (emptiness, consolidation, replacement)


def scale_down(ctx: ScaleDownContext, methods: Sequence[Method] = DEFAULT_METHODS) -> tuple[str, list[Command]]:
    """Run ``methods`` in order; return the first non-empty result and its name."""
    for method in methods:
        commands = method(ctx)
        if commands:
            return getattr(method, "__name__", type(method).__name__), commands
    return "", []
