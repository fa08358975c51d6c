"""Explain: why a job is where it is, or why it is still pending — as data.

``explain_job(snapshot, job_id)`` runs the same plan the controller would run
and returns an ``Explanation``: where the job is (or what this plan would do
with it), the market decision and its reason, the top offerings by expected
cost per unit of work with every term of the formula, and each rejected
offering's failed constraint, grouped by reason. ``to_dict()`` is what the API
serves and ``spotfleet explain`` renders; nothing here formats for a terminal.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from spotfleet.errors import NotFound
from spotfleet.model.job import Job, JobState
from spotfleet.model.notice import spot_notice_seconds
from spotfleet.model.snapshot import Snapshot
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import SPOT_ONLY, decide_market, notice_checkpoint_fits, work_at_risk_hours
from spotfleet.policies.selection import Scored, economics_of, rank
from spotfleet.policies.shape import Shape, shape_of
from spotfleet.policies.spotfleet import PlanResult, SpotfleetPolicy, _known_hours


@dataclass(frozen=True, slots=True)
class OfferingRow:
    key: str
    provider: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpus: int
    market: str
    price_per_hour: float
    throughput: float
    hazard: float
    overhead: float
    egress_per_hour: float
    fill: int
    cost_per_work: float
    interconnect: str = "tcp"
    scaling: float = 1.0  # the gang's multi-node scaling efficiency on that fabric (1.0: one node)

    @classmethod
    def of(cls, s: Scored) -> OfferingRow:
        o = s.offering
        return cls(o.key, o.provider, o.region, o.zone, o.instance_type, o.gpu, o.gpu_count, o.market.value,
                   o.price_per_hour, s.throughput, s.hazard, s.overhead, s.egress_per_hour, s.fill,
                   s.cost_per_work, o.interconnect, s.scaling)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RejectedGroup:
    reason: str
    count: int
    examples: tuple[str, ...]  # offering keys


@dataclass(frozen=True, slots=True)
class Placement:
    node_rank: int
    instance_id: str
    instance_type: str
    zone: str
    market: str
    gpu_indices: tuple[int, ...]
    mig_slices: int = 0


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: str
    name: str
    state: str
    priority: str
    summary: str
    markets: tuple[str, ...] = ()
    market_reason: str = ""
    plan_status: str = ""  # bound | reserved | blocked | "" (not planned: already placed)
    plan_code: str = ""
    plan_reason: str = ""
    note: str = ""  # preemption
    placement: tuple[Placement, ...] = ()
    top: tuple[OfferingRow, ...] = ()
    rejected: tuple[RejectedGroup, ...] = ()
    compatible: int = 0
    work_unit: str = "A100-80GB-hour"
    policy: str = "spotfleet"  # the policy whose reasoning is shown
    policy_note: str = ""  # set when the controller runs another policy than the one explained
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def explain_job(
    snapshot: Snapshot,
    job_id: str,
    *,
    policy: SpotfleetPolicy | None = None,
    top: int | None = None,
    configured: str | None = None,
) -> Explanation:
    """Why ``job_id`` is where it is (raises ``NotFound`` for an unknown id).

    ``policy`` is the controller's own (its knobs); ``configured`` names the
    policy the controller runs when that is not a ``SpotfleetPolicy`` (e.g.
    ``simple``): the explanation then says it shows spotfleet's reasoning, not
    what decided."""
    job = snapshot.jobs.get(job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    policy = policy or SpotfleetPolicy()
    knobs = policy.knobs
    result = policy.plan(snapshot)
    forecast = result.forecast
    assert forecast is not None
    shape = shape_of(job.spec, forecast)
    econ = economics_of(job, forecast, knobs)
    decision = result.markets.get(job.id)
    if decision is None:  # not planned this step (already placed): what it would be
        decision = decide_market(job, now=snapshot.now, expected_hours=_known_hours(job.spec, forecast), knobs=knobs)
    # a job waiting for a cheaper spot pool has no market this step: show the spot ranking it waits on
    ranking = rank(snapshot.offerings, shape=shape, econ=econ, markets=decision.markets or SPOT_ONLY,
                   forecast=forecast, unavailable=snapshot.unavailable, now=snapshot.now,
                   market_reason=decision.reason, knobs=knobs)  # fmt: skip
    groups: OrderedDict[str, list[str]] = OrderedDict()
    for o, reason in ranking.rejected:
        groups.setdefault(constraint_of(reason), []).append(o.key)
    rejected = tuple(
        RejectedGroup(reason, len(keys), tuple(keys[:3]))
        for reason, keys in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    )
    placement = tuple(
        Placement(
            b.node_rank,
            b.instance_id,
            inst.offering.instance_type if inst else "?",
            inst.offering.zone if inst else "?",
            inst.offering.market.value if inst else "?",
            b.gpu_indices,
            b.mig_slices,
        )
        for b in job.bindings
        for inst in [snapshot.instances.get(b.instance_id)]
    )
    outcome = result.outcomes.get(job.id)
    note = result.notes.get(job.id, "")
    summary = _summary(job.state, placement, outcome.status if outcome else "", outcome.reason if outcome else "",
                       note, len(ranking.scored))  # fmt: skip
    unit = "job units (learned)" if econ.learned else ("job units" if econ.override else "A100-80GB-hour")
    extra: dict[str, Any] = {}
    plan_status, plan_code = (outcome.status, outcome.code) if outcome else ("", "")
    plan_reason = outcome.reason if outcome else ""
    if job.spec.deadline is not None and not job.terminal:
        extra["deadline"] = _deadline_outlook(policy, job, shape, result, now=snapshot.now)
    if job.failures or snapshot.avoid.get(job.id):
        retry_at = job.retry_not_before
        avoid = sorted(snapshot.avoid.get(job.id, ()))
        extra["retries"] = {
            "failures": job.failures, "max_retries": job.spec.max_retries, "last_exit_code": job.exit_code,
            "runs": job.runs, "not_before": retry_at.isoformat() if retry_at else None, "avoiding": avoid,
            "crash_loop": job.failures >= 2,
        }  # fmt: skip
        if retry_at is not None and retry_at > snapshot.now:
            loop = "crash loop: " if job.failures >= 2 else ""
            summary = (f"pending: {loop}failed {job.failures}× (last exit {job.exit_code}); retry "
                       f"{job.failures}/{job.spec.max_retries} waits its backoff until {retry_at:%H:%M:%S}"
                       + (f", avoiding {', '.join(avoid)}" if avoid else ""))  # fmt: skip
            plan_status, plan_code, plan_reason = "blocked", "backoff", summary
    return Explanation(
        job_id=job.id, name=job.spec.name, state=job.state.value, priority=job.spec.priority.value, summary=summary,
        markets=tuple(m.value for m in decision.markets), market_reason=decision.reason,
        plan_status=plan_status, plan_code=plan_code, plan_reason=plan_reason, note=note, placement=placement,
        top=tuple(OfferingRow.of(s) for s in ranking.scored[: top or knobs.explain_top]),
        rejected=rejected, compatible=len(ranking.scored), work_unit=unit, extra=extra, policy=policy.name,
        policy_note="" if configured in (None, policy.name) else (
            f"the controller runs the {configured!r} policy; this ranking is what the spotfleet policy would do"),
    )  # fmt: skip


def _deadline_outlook(
    policy: SpotfleetPolicy, job: Job, shape: Shape, result: PlanResult, *, now: datetime
) -> dict[str, Any]:
    """What the deadline rules read (``policies/slack.py``): the learned supply
    of the job's spot market and its slack outlook."""
    from spotfleet.policies.spotfleet import _market_view

    index, forecast = result.index, result.forecast
    if index is None or forecast is None:
        return {}
    view = _market_view(index, shape)
    idle = job.state is JobState.PENDING and not index.classes(shape, SPOT_ONLY)
    slack = policy.slack_outlook(job, shape, index, forecast, now=now, idle_without_spot=idle)
    out: dict[str, Any] = {}
    if view is not None:
        s = view.supply
        out["spot_market"] = {
            "availability": round(s.availability, 3), "mean_up_h": round(s.mean_up_h, 2),
            "mean_down_h": round(s.mean_down_h, 2), "available_now": s.up_now,
            "cheapest_spot_per_h": view.spot_price, "on_demand_per_h": view.on_demand_price,
            "reclaims_per_h": round(view.hazard, 3), "expected_rest_of_run_h": round(1 / view.hazard, 2)
            if view.hazard > 0 else None,
        }  # fmt: skip
    out["reclaim_loss"] = _reclaim_loss(job, view.spot_providers if view else (), policy.knobs,
                                        _known_hours(job.spec, forecast))  # fmt: skip
    if slack is not None:
        out["slack"] = {
            "spendable_h": round(slack.spendable_h, 2), "expected_need_h": round(slack.need_mean_h, 2),
            "need_sd_h": round(slack.need_sd_h, 2), "p_runs_out": round(slack.pressure, 3),
            "usd_per_hour_of_slack": round(slack.value_per_h, 2), "summary": slack.describe(),
        }  # fmt: skip
    return out


def _reclaim_loss(job: Job, providers: tuple[str, ...], knobs: Knobs, hours: float | None) -> dict[str, Any]:
    """Whether a reclaim on the job's spot clouds costs only a restart, or also the
    work since its last checkpoint (``market.notice_checkpoint_fits``), and why;
    for a running job that would lose work, how much is at risk now (what the
    leave-spot rule weighs: ``market.work_at_risk_hours``; None: not known)."""
    took = job.spec.checkpoint.duration
    interval = job.spec.checkpoint.interval
    fits = notice_checkpoint_fits(job.spec, providers, knobs)
    notices = {p: spot_notice_seconds(p) for p in providers}
    if knobs.trust_notice_checkpoint is not None:
        why = f"trust_notice_checkpoint = {str(knobs.trust_notice_checkpoint).lower()} (policy knob)"
    elif took is None:
        why = "checkpoint.duration not given: assumed to fit the notice"
    else:
        shown = ", ".join(f"{p} {s:g} s" for p, s in notices.items()) or "none known: shortest assumed"
        why = f"checkpoint takes {took.total_seconds():g} s; notice {shown}"
    reserved = 0.0 if fits else (interval.total_seconds() / 3600.0 if interval is not None else None)
    out = {"checkpoint_s": took.total_seconds() if took is not None else None, "notice_s": notices,
           "fits_notice": fits, "reserved_work_h": reserved, "summary": why}  # fmt: skip
    if not fits and job.state is JobState.RUNNING and hours is not None:
        risk = work_at_risk_hours(job, hours)
        out["at_risk_h"] = None if risk is None else round(risk if reserved is None else min(risk, reserved), 3)
    return out


_VARYING = (
    (re.compile(r"^(region|provider|GPU) .+? not in "), r"\1 * not in "),  # region us-west-2 not in → region * not in
    (re.compile(r"^[\d.]+ (GPUs|GiB per GPU|vCPUs|GiB memory|GiB GPU) <"), r"\1 <"),  # 1 GPUs < 4 → GPUs < 4
    (re.compile(r"^\$[\d.]+/h >"), "price >"),
    (re.compile(r" until \S+ after"), " after"),
)


def constraint_of(reason: str) -> str:
    """A rejection reason with the offering's own value elided, so offerings
    failing the same constraint group together (``region * not in [...]``)."""
    for pattern, repl in _VARYING:
        reason = pattern.sub(repl, reason)
    return reason


def _summary(state: JobState, placement: tuple[Placement, ...], status: str, reason: str, note: str,
             compatible: int) -> str:  # fmt: skip
    if placement and state is not JobState.PENDING:
        where = ", ".join(f"{p.instance_id} ({p.instance_type} {p.market} in {p.zone})" for p in placement)
        return f"{state.value} on {where}"
    if state is not JobState.PENDING:
        return state.value
    if status == "bound":
        return f"pending; this step binds it: {reason}"
    if status == "blocked":
        extra = f"; {note}" if note else ""
        return f"pending: {reason}{extra}"
    if compatible == 0:
        return "pending: no offering satisfies the spec (see rejected)"
    return "pending"
