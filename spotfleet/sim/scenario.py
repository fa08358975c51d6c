"""Policies by name, and scenario (a) end to end: one deadline job under one policy.

``optimal`` is not a planner policy: it is the omniscient dynamic program of
``optimal.py``, defined for the single-job scenario only. Every other name is a
``Policy`` run through the real controller by ``engine.Simulation``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from spotfleet.errors import InvalidSpec
from spotfleet.policies.base import Policy
from spotfleet.policies.baselines import BASELINES
from spotfleet.sim.engine import SimResult, SimSettings, Simulation
from spotfleet.sim.optimal import OptimalResult, optimal_single_job
from spotfleet.sim.traces import TraceSet
from spotfleet.sim.workload import single_job

POLICY_NAMES = ("on-demand", "greedy", "uniform-progress", "ups", "ucm", "spotfleet", "optimal")


def make_policy(
    name: str, *, restart_hours: float = 0.2, tick_hours: float = 0.1, hazard_prior_per_h: float | None = None
) -> Policy:
    """A fresh planner policy for ``name`` (not ``optimal``). ``hazard_prior_per_h``:
    spotfleet's hazard prior for every pool (``Knobs.hazard_prior_per_h``; None: per cloud)."""
    if name in BASELINES:
        return BASELINES[name](restart_hours=restart_hours, decision_interval_hours=tick_hours)
    if name == "spotfleet":
        try:
            from spotfleet.policies.knobs import Knobs
            from spotfleet.policies.spotfleet import SpotfleetPolicy
        except ImportError as exc:  # the policy package lands separately
            raise InvalidSpec("policy", f"the spotfleet policy is not available in this build ({exc})") from None
        return SpotfleetPolicy(Knobs(restart_delay_h=restart_hours, decision_interval_h=tick_hours,
                                     hazard_prior_per_h=hazard_prior_per_h))  # fmt: skip
    known = ", ".join(POLICY_NAMES)
    if name == "optimal":
        raise InvalidSpec("policy", "optimal is the omniscient bound of scenario (a), not a planner policy")
    raise InvalidSpec("policy", f"unknown policy {name!r}; choose one of {known}")


@dataclass(frozen=True, slots=True)
class SingleJobRun:
    """One policy on one start tick of scenario (a)."""

    policy: str
    start: datetime
    cost: float
    finished_at: datetime | None
    deadline: datetime
    sim: SimResult | None = None
    optimal: OptimalResult | None = None

    @property
    def missed(self) -> bool:
        return self.finished_at is None or self.finished_at > self.deadline


def run_single_job(
    traces: TraceSet,
    policy: str,
    *,
    work_hours: float,
    deadline_hours: float,
    start_tick: int,
    restart_hours: float = 0.2,
    checkpoint_interval: timedelta | None = None,
    settings: SimSettings | None = None,
    checkpoint_gb: float = 0.0,
    history_hours: float | None = None,
    hazard_prior_per_h: float | None = None,
) -> SingleJobRun:
    """Scenario (a) for one policy from one start tick.

    ``checkpoint_gb``: the job's checkpoint size; resuming it in another region
    or cloud pays that many GiB of egress, in the simulator and in the optimum.
    ``history_hours``: how much of the traces before the start the controller
    has watched (``SimSettings.history_hours``; None: the settings').
    ``hazard_prior_per_h``: spotfleet's hazard prior (``make_policy``).
    """
    base = settings or SimSettings()
    start = traces.time_of(start_tick)
    deadline = start + timedelta(hours=deadline_hours)
    if policy == "optimal":
        best = optimal_single_job(
            traces,
            work_hours=work_hours,
            deadline_hours=deadline_hours,
            start_tick=start_tick,
            restart_hours=restart_hours,
            with_schedule=False,
            checkpoint_gb=checkpoint_gb,
            egress_inter_region_per_gib=base.egress_inter_region_per_gib,
            egress_internet_per_gib=base.egress_internet_per_gib,
        )
        finished = start + timedelta(seconds=best.finish_seconds) if best.feasible else None
        return SingleJobRun("optimal", start, best.cost, finished, deadline, optimal=best)
    item = single_job(
        traces,
        work_hours=work_hours,
        deadline_hours=deadline_hours,
        start_tick=start_tick,
        checkpoint_interval=checkpoint_interval,
        checkpoint_gb=checkpoint_gb,
        checkpoint_seconds=base.checkpoint_seconds,
    )
    sim_settings = SimSettings(
        restart_seconds=restart_hours * 3600,
        checkpoint_seconds=base.checkpoint_seconds,
        skip_quiet=base.skip_quiet,
        catalog_on_demand=base.catalog_on_demand,
        plan=base.plan,
        checkpoint_gb=checkpoint_gb,
        egress_inter_region_per_gib=base.egress_inter_region_per_gib,
        egress_internet_per_gib=base.egress_internet_per_gib,
        history_hours=base.history_hours if history_hours is None else history_hours,
    )
    planner = make_policy(policy, restart_hours=restart_hours, tick_hours=traces.tick_seconds / 3600,
                          hazard_prior_per_h=hazard_prior_per_h)  # fmt: skip
    # Run past the deadline (a late job still costs money) but not forever.
    end = deadline + timedelta(hours=max(deadline_hours, work_hours))
    result = Simulation(traces, [item], planner, start=start, end=end, settings=sim_settings).run()
    outcome = result.jobs[0]
    return SingleJobRun(policy, start, result.cost, outcome.finished_at, deadline, sim=result)


def start_ticks(traces: TraceSet, *, count: int, window_hours: float, seed: int = 0) -> list[int]:
    """``count`` evenly spaced start ticks leaving ``window_hours`` of trace after each.

    ``seed`` shifts the whole grid by a deterministic fraction of one spacing, so
    different seeds sample different (but reproducible) starts.
    """
    window = int(window_hours * 3600 / traces.tick_seconds + 0.999999)
    last = traces.n_ticks - window
    if last < 0:
        raise InvalidSpec(
            "traces",
            f"the traces ({traces.n_ticks} ticks) are shorter than the {window_hours} h window",
        )
    if count <= 1:
        return [0]
    spacing = last / (count - 1)
    shift = random.Random(seed).random() * spacing if seed else 0.0
    return [min(int(i * spacing + shift), last) for i in range(count)]
