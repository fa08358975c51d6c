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
4. preemption for urgent jobs that could be neither placed nor bought, and
   planned moves of deadline jobs off spot when their slack covers a restart
   but no longer an interruption (``market.should_leave_spot``);
5. scale-down methods (emptiness → consolidation) on what is left.

Commands come out in the order the executor should apply them: launches,
binds, preemptions/drains, then scale-down. The plan is deterministic for a
given snapshot and id source: new instance ids come from
``snapshot.new_id`` (sequential in tests and the simulator) and skip ids
already present.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spotfleet.model.job import Job, JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Command, Preempt, Snapshot
from spotfleet.model.spec import JobSpec, Priority
from spotfleet.policies import preemption
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.knobs import DEFAULT_KNOBS, Knobs
from spotfleet.policies.market import BudgetLedger, MarketDecision, decide_market, should_leave_spot
from spotfleet.policies.placement import Demand, Fleet, Outcome, Placer, id_generator
from spotfleet.policies.scaledown import DEFAULT_METHODS, Method, ScaleDownContext, scale_down
from spotfleet.policies.selection import Economics, OfferingIndex, economics_of
from spotfleet.policies.shape import Shape, shape_of


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

    def _deadline_moves(self, snapshot: Snapshot, forecast: Forecast, result: PlanResult) -> list[Command]:
        """Preempt (checkpoint, requeue) deadline jobs whose spot slack ran out."""
        out: list[Command] = []
        for job in snapshot.jobs.values():
            if job.state is not JobState.RUNNING or job.spec.deadline is None or job.cancel_requested:
                continue
            if _last_market(job, snapshot) is not Market.SPOT or _threatened(job, snapshot):
                continue
            why = should_leave_spot(job, now=snapshot.now, expected_hours=_known_hours(job.spec, forecast),
                                    knobs=self.knobs)  # fmt: skip
            if why is not None:
                out.append(Preempt(job.id, why))
                result.notes[job.id] = why
        return out

    # ------------------------------------------------------------------
    def plan(self, snapshot: Snapshot) -> PlanResult:
        knobs, now = self.knobs, snapshot.now
        forecast = Forecast.from_history(snapshot.runs, snapshot.exposure)
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
        for job in jobs.values():
            virtual = job.state is JobState.DRAINING or (job.state is JobState.RUNNING and _threatened(job, snapshot))
            if job.state is not JobState.PENDING and not virtual:
                continue
            if job.cancel_requested:
                continue
            spec = job.spec
            skey = _shape_key(spec, forecast)
            shape = shapes.get(skey)
            if shape is None:
                shape = shapes[skey] = shape_of(spec, forecast)
            ekey = _econ_key(spec, forecast)
            econ = econs.get(ekey)
            if econ is None:
                econ = econs[ekey] = economics_of(job, forecast, knobs)
            decision = decide_market(
                job,
                now=now,
                expected_hours=_known_hours(spec, forecast),
                knobs=knobs,
                last_market=_last_market(job, snapshot),
            )
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
            groups.setdefault((tier(job), not virtual, shape, decision.markets, econ, decision.urgent), []).append(d)

        ordered = []
        for key, members in groups.items():
            members.sort(key=lambda d: (d.job.created_at, d.job.id))
            ordered.append(((key[0], key[1], members[0].job.created_at, members[0].job.id), members))
        ordered.sort(key=lambda t: t[0])

        placer = Placer(fleet, index, ledger, knobs, id_generator(snapshot.new_id, snapshot.instances))
        for _, members in ordered:
            placer.place_group(members)
        result.outcomes = placer.outcomes

        commands: list[Command] = [*placer.launches, *placer.binds]
        commands.extend(self._deadline_moves(snapshot, forecast, result))
        if knobs.preemption_enabled and placer.blocked:
            short: dict[str, float] = {}
            for d in placer.blocked:
                if d.urgent and placer.outcomes[d.job.id].code == "budget":
                    ranked = index.ranked(d.shape, d.markets, d.econ, group=1)
                    if ranked:
                        cheapest = min(ranked.price(j) for j in range(len(ranked))) * d.shape.nodes
                        short[d.job.id] = cheapest - ledger.headroom(d.tenant)
            pre, notes = preemption.preempt(
                placer.blocked,
                fleet=fleet,
                index=index,
                now=now,
                budget_short=short,
                max_jobs=knobs.preemption_max_jobs,
            )
            commands.extend(pre)
            result.notes.update(notes)
        method, down = scale_down(ScaleDownContext(snapshot, fleet, index, forecast, knobs), self.methods)
        result.scale_down_method = method
        commands.extend(down)
        result.commands = commands
        return result


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
