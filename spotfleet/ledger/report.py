"""Roll ledger lines up into the answers people ask for.

Totals: what was paid, the spot share, what on-demand would have cost for the
same attributed time (the counterfactual, priced per segment at the same
instance type's on-demand price in the same region), the savings, idle cost
(paid, held by no job, including billing minimums), interruption cost
(restart overhead + redone work), failure cost (attempts that exited non-zero
and the start-up of their retries: a bug's cost, never filed under
interruptions), and dollars per GPU-hour — paid (all GPU-hours
bought) and effective (GPU-hours jobs held). Rows group by any of
``tenant, job, family, instance-type, region, market, day``; idle lines get
``(idle)`` for the job-side keys, so every table sums to the total.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from spotfleet.ledger import money
from spotfleet.ledger.attribution import Line, Phase
from spotfleet.ledger.types import AttemptUsage

IDLE = "(idle)"
GROUPS: dict[str, Callable[[Line], str]] = {
    "tenant": lambda ln: ln.attempt.tenant if ln.attempt else IDLE,
    "job": lambda ln: ln.attempt.job_id if ln.attempt else IDLE,
    "family": lambda ln: ln.attempt.family if ln.attempt else IDLE,
    "instance-type": lambda ln: ln.segment.instance_type,
    "region": lambda ln: ln.segment.region,
    "market": lambda ln: ln.segment.market,
    "day": lambda ln: ln.day.isoformat(),
}


@dataclass(slots=True)
class Sums:
    """Additive figures of a set of lines (micro-dollars and seconds)."""

    cost: int = 0
    on_demand: int = 0
    spot: int = 0
    idle: int = 0
    billing_minimum: int = 0
    startup: int = 0
    restart: int = 0
    redone: int = 0
    failed: int = 0
    bound_idle: Fraction = field(default_factory=Fraction)  # cost of held GPUs that sat under 5 %
    gpu_seconds: Fraction = field(default_factory=Fraction)
    used_gpu_seconds: Fraction = field(default_factory=Fraction)

    def add(self, line: Line, idle_fraction: float = 0.0) -> None:
        self.cost += line.cost
        self.on_demand += line.on_demand
        self.gpu_seconds += line.gpu_seconds
        if line.segment.market == "spot":
            self.spot += line.cost
        if line.phase is Phase.IDLE:
            self.idle += line.cost
        elif line.phase is Phase.BILLING_MINIMUM:
            self.billing_minimum += line.cost
        else:
            self.used_gpu_seconds += line.gpu_seconds
            if line.phase is Phase.STARTUP:
                self.startup += line.cost
            elif line.phase is Phase.RESTART:
                self.restart += line.cost
            elif line.phase is Phase.REDONE:
                self.redone += line.cost
            elif line.phase is Phase.FAILED:
                self.failed += line.cost
            if line.phase in (Phase.USEFUL, Phase.REDONE) and idle_fraction:
                self.bound_idle += Fraction(line.cost) * Fraction(idle_fraction)

    @property
    def idle_total(self) -> int:
        return self.idle + self.billing_minimum

    @property
    def interruption(self) -> int:
        return self.restart + self.redone

    @property
    def savings(self) -> int:
        return self.on_demand - self.cost

    def figures(self) -> dict[str, Any]:
        """JSON/CSV-ready: dollars as floats rounded to the micro-dollar, hours, ratios."""
        gpu_h = float(self.gpu_seconds) / 3600
        used_h = float(self.used_gpu_seconds) / 3600
        return {
            "cost": _usd(self.cost),
            "on_demand_equivalent": _usd(self.on_demand),
            "savings": _usd(self.savings),
            "savings_pct": round(100 * self.savings / self.on_demand, 2) if self.on_demand else 0.0,
            "spot_cost": _usd(self.spot),
            "spot_share_pct": round(100 * self.spot / self.cost, 2) if self.cost else 0.0,
            "idle_cost": _usd(self.idle_total),
            "billing_minimum_cost": _usd(self.billing_minimum),
            "startup_cost": _usd(self.startup),
            "restart_overhead_cost": _usd(self.restart),
            "redone_work_cost": _usd(self.redone),
            "interruption_cost": _usd(self.interruption),
            "failed_attempts_cost": _usd(self.failed),
            "gpu_idle_while_bound_cost": _usd(money.round_half_up(self.bound_idle)),
            "gpu_hours_paid": round(gpu_h, 6),
            "gpu_hours_used": round(used_h, 6),
            "usd_per_gpu_hour_paid": round(self.cost / 1e6 / gpu_h, 6) if gpu_h else None,
            "usd_per_gpu_hour_effective": round(self.cost / 1e6 / used_h, 6) if used_h else None,
        }


def _usd(micros: int) -> float:
    return round(micros / 1e6, 6)


@dataclass(slots=True)
class Report:
    since: datetime | None
    until: datetime | None
    now: datetime
    by: list[str]
    totals: Sums
    rows: list[tuple[tuple[str, ...], Sums]]
    instances: int
    jobs: int
    lines: list[Line]
    gpu_samples: int = 0  # NVML samples behind the "GPUs idle while bound" figure (0: no telemetry)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": {"since": _iso(self.since), "until": _iso(self.until), "generated_at": _iso(self.now)},
            "group_by": self.by,
            "totals": {
                "instances": self.instances,
                "jobs": self.jobs,
                "gpu_telemetry_samples": self.gpu_samples,
                **self.totals.figures(),
            },
            "rows": [self.row_dict(keys, sums) for keys, sums in self.rows],
        }

    def row_dict(self, keys: tuple[str, ...], sums: Sums) -> dict[str, Any]:
        return {**dict(zip(self.by, keys, strict=True)), **sums.figures()}


def _iso(t: datetime | None) -> str | None:
    return t.isoformat().replace("+00:00", "Z") if t is not None else None


def in_window(line: Line, since: datetime | None, until: datetime | None) -> bool:
    """Lines never straddle the window's edges (they are cut there), so this is exact."""
    return (since is None or line.start >= since) and (until is None or line.end <= until)


def build_report(
    lines: Iterable[Line],
    *,
    usage: Mapping[tuple[str, int, int], AttemptUsage],
    now: datetime,
    by: Sequence[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
) -> Report:
    for key in by:
        if key not in GROUPS:
            raise ValueError(f"unknown --by {key!r}; choose from {', '.join(GROUPS)}")
    chosen = [ln for ln in lines if in_window(ln, since, until)]
    totals = Sums()
    groups: dict[tuple[str, ...], Sums] = defaultdict(Sums)
    for ln in chosen:
        frac = _idle_fraction(ln, usage)
        totals.add(ln, frac)
        if by:
            groups[tuple(GROUPS[k](ln) for k in by)].add(ln, frac)
    rows = sorted(groups.items(), key=lambda kv: (-kv[1].cost, kv[0]))
    if "day" in by and len(by) == 1:
        rows.sort(key=lambda kv: kv[0])
    return Report(since=since, until=until, now=now, by=list(by), totals=totals, rows=rows,
                  instances=len({ln.segment.instance_id for ln in chosen}),
                  jobs=len({ln.job_id for ln in chosen if ln.job_id}), lines=chosen,
                  gpu_samples=sum(u.gpu_samples for u in usage.values()))  # fmt: skip


def _idle_fraction(line: Line, usage: Mapping[tuple[str, int, int], AttemptUsage]) -> float:
    a = line.attempt
    if a is None:
        return 0.0
    u = usage.get((a.job_id, a.attempt, a.node_rank))
    return u.idle_fraction if u is not None else 0.0


# ------------------------------------------------------------ one job


@dataclass(slots=True)
class AttemptCost:
    attempt: int
    node_rank: int
    instance_id: str
    instance_type: str
    market: str
    zone: str
    bound_at: datetime
    ended_at: datetime | None
    outcome: str | None
    sums: Sums
    usage: AttemptUsage | None

    @property
    def overhead(self) -> int:
        return self.sums.startup + self.sums.restart

    def to_dict(self) -> dict[str, Any]:
        u = self.usage
        return {
            "attempt": self.attempt, "node_rank": self.node_rank, "instance_id": self.instance_id,
            "instance_type": self.instance_type, "market": self.market, "zone": self.zone,
            "bound_at": _iso(self.bound_at), "ended_at": _iso(self.ended_at), "outcome": self.outcome,
            **self.sums.figures(),
            "overhead_cost": _usd(self.overhead),
            "peak_gpu_memory_mib": u.peak_gpu_memory_mib if u else None,
            "mean_gpu_utilization_pct": u.mean_utilization_pct if u else None,
            "resumed_from_step": u.resume_step if u else None,
            "last_step": u.last_step if u else None,
            "isolation": u.isolation if u else None,
            "isolation_detail": u.isolation_phrase if u and u.isolation else None,
            "isolation_note": u.isolation_note if u else None,
            "gpu_share_given": u.given_share if u else None,
            "gpu_share_used": round(u.mean_used_share, 4) if u and u.mean_used_share is not None else None,
        }  # fmt: skip


def job_breakdown(lines: Iterable[Line], job_id: str, *,
                  usage: Mapping[tuple[str, int, int], AttemptUsage]) -> list[AttemptCost]:  # fmt: skip
    out: dict[tuple[int, int, str], AttemptCost] = {}
    for ln in lines:
        a = ln.attempt
        if a is None or a.job_id != job_id:
            continue
        key = (a.attempt, a.node_rank, a.instance_id)
        if key not in out:
            u = usage.get((a.job_id, a.attempt, a.node_rank))
            out[key] = AttemptCost(a.attempt, a.node_rank, a.instance_id, ln.segment.instance_type,
                                   ln.segment.market, ln.segment.zone, a.bound_at, a.ended_at, a.outcome, Sums(), u)  # fmt: skip
        out[key].sums.add(ln, _idle_fraction(ln, usage))
    return [out[k] for k in sorted(out)]
