"""Price- and lifetime-aware spot for deadline jobs (issue 12): spot is taken only
when its expected cost per unit of useful work (price over the useful share left
by reclaims, the hazard learned from ``Snapshot.exposure``) beats on-demand and
its pool outlives a restart; the deadline margin comes from the decision interval."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from spotfleet.model.job import JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import PoolExposure
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import (
    SpotOffer,
    deadline_margin,
    deadline_thresholds,
    should_leave_spot,
    spot_cost_per_work,
    spot_worth,
    useful_fraction,
)
from spotfleet.policies.selection import OfferingIndex, economics_of
from spotfleet.policies.shape import shape_of
from spotfleet.policies.slack import SlackOutlook
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, job, launches, offering, snapshot


def test_useful_fraction_is_the_exponential_survival_past_a_restart() -> None:
    assert useful_fraction(0.0, 0.2) == 1.0
    assert useful_fraction(0.5, 0.2) == pytest.approx(math.exp(-0.1))
    assert useful_fraction(0.5, 0.2, 0.3) == pytest.approx(math.exp(-0.25))
    # the expected cost per useful hour grows with the hazard
    cheap = spot_cost_per_work(SpotOffer(1.0, 0.1), restart_h=0.2)
    risky = spot_cost_per_work(SpotOffer(1.0, 2.0), restart_h=0.2)
    assert 1.0 < cheap < risky == pytest.approx(math.exp(0.4))


def test_spot_worth_rejects_short_lived_and_dearer_than_on_demand_spot() -> None:
    assert spot_worth(None, restart_h=0.2) == "no usable spot offering"
    assert spot_worth(SpotOffer(0.3, 0.5, 1.0), restart_h=0.2) is None
    # a pool whose windows last 1/6 h on average: shorter than a 0.2 h restart
    short = spot_worth(SpotOffer(0.3, 6.0, 1.0), restart_h=0.2)
    assert short is not None and "lifetime" in short
    # 85 % of on-demand and 1 reclaim/h: 0.85·e^{0.2} = 1.04 > 1 → not worth it
    dear = spot_worth(SpotOffer(0.85, 1.0, 1.0), restart_h=0.2)
    assert dear is not None and "on-demand" in dear
    assert spot_worth(SpotOffer(0.85, 0.1, 1.0), restart_h=0.2) is None  # same price, calm pool: worth it
    assert spot_worth(SpotOffer(0.85, 1.0, None), restart_h=0.2) is None  # no on-demand to compare


def test_margin_is_two_decision_intervals_when_known() -> None:
    assert deadline_margin(Knobs()) == Knobs().restart_delay_h  # unknown step: one restart (the old rule)
    assert deadline_margin(Knobs(decision_interval_h=0.05)) == pytest.approx(0.1)
    assert deadline_margin(Knobs(decision_interval_h=0.05, deadline_margin_h=0.3)) == 0.3
    assert deadline_margin(Knobs(decision_interval_h=0.5)) == Knobs().restart_delay_h  # capped at a restart
    d = job("d", deadline=(T0 + timedelta(hours=10)).isoformat(), expected_duration="4h")
    old = deadline_thresholds(d, now=T0, expected_hours=4, knobs=Knobs(restart_delay_h=0.2))
    new = deadline_thresholds(d, now=T0, expected_hours=4, knobs=Knobs(restart_delay_h=0.2, decision_interval_h=0.05))
    # switch-to-on-demand point: restart + margin, from the job's restart and the step, not 0.4 h
    assert old.reserve == pytest.approx(0.4) and new.reserve == pytest.approx(0.3)
    assert new.start == pytest.approx(0.5) and new.wait == pytest.approx(0.5 + 0.1 + 0.2 + 0.1)


@pytest.mark.parametrize("step_s", [32.0, 195.0, 360.0])
def test_a_move_to_on_demand_ordered_at_the_first_step_below_the_reserve_still_lands_in_time(step_s: float) -> None:
    """The leave-spot rule fires at the first step whose slack is under the reserve,
    up to one step after the slack crossed it; the move lands one step later (drained,
    then bound), then restarts (``d``). Every slack that can be seen at that first step
    must cover the step and the restart. With a one-step margin it did not: a job on
    32 s steps missed its deadline by 8 s of work (aws-v100-preemption-2023-04)."""
    step_h, d = step_s / 3600.0, 0.2
    knobs = Knobs(restart_delay_h=d, decision_interval_h=step_h)
    due = T0 + timedelta(hours=30)
    lowest = None
    for k in range(1, 200):  # slack seen at the first step below the reserve: [reserve − step, reserve)
        work = 30.0 - d - 0.004 * k  # slack from d + 0.8 h down to d, in 0.004 h steps
        j = job("d", deadline=due.isoformat(), expected_duration=f"{work * 3600:.0f}s", state=JobState.RUNNING,
                progress={"done_s": 0})  # fmt: skip
        t = deadline_thresholds(j, now=T0, expected_hours=work, knobs=knobs)
        if t.reserve - step_h <= t.slack < t.reserve:
            assert should_leave_spot(j, now=T0, expected_hours=work, knobs=knobs) is not None
            lowest = t.slack if lowest is None else min(lowest, t.slack)
            assert t.slack - step_h - d >= -1e-9, f"slack {t.slack:.4f} h cannot cover a step and a restart"
    assert lowest is not None  # the band was reached


def _deadline_job() -> object:
    return job("d", deadline=(T0 + timedelta(hours=30)).isoformat(), expected_duration="20h",
               checkpoint={"interval": "30m"})  # fmt: skip


def test_deadline_job_skips_spot_that_reclaims_make_dearer_than_on_demand() -> None:
    spot = offering("p3.2xlarge", "V100", 1, 2.6, market=Market.SPOT, on_demand=3.06)
    od = offering("p3.2xlarge", "V100", 1, 3.06, on_demand=3.06)
    d = _deadline_job()
    calm = SpotfleetPolicy(Knobs(restart_delay_h=0.2)).plan(snapshot(jobs=[d], offerings=[spot, od]))
    assert [c.offering.market for c in launches(calm.commands)] == [Market.SPOT]
    # the same pool, observed: 30 interruptions in 10 h alive → λ ≈ 1.1/h, e^{0.22}·2.6 > 3.06
    stormy = [PoolExposure(spot.key, 10.0, 30)]
    plan = SpotfleetPolicy(Knobs(restart_delay_h=0.2)).plan(
        snapshot(jobs=[_deadline_job()], offerings=[spot, od], exposure=tuple(stormy))
    )
    assert plan.markets["d"].markets != (Market.SPOT,)
    assert [c.offering.market for c in launches(plan.commands)] == [Market.ON_DEMAND]


def test_deadline_job_prefers_the_cheaper_spot_pool_after_reclaim_cost() -> None:
    # zone a is cheaper but stormy (learned); zone b costs a little more and is calm: b wins
    a = offering("p3.2xlarge", "V100", 1, 0.90, market=Market.SPOT, on_demand=3.06, zone="use1-az1")
    b = offering("p3.2xlarge", "V100", 1, 1.00, market=Market.SPOT, on_demand=3.06, zone="use1-az2")
    od = offering("p3.2xlarge", "V100", 1, 3.06, on_demand=3.06)
    exposure = (PoolExposure(a.key, 10.0, 40), PoolExposure(b.key, 50.0, 0))
    plan = SpotfleetPolicy(Knobs(restart_delay_h=0.2)).plan(
        snapshot(jobs=[_deadline_job()], offerings=[a, b, od], exposure=exposure)
    )
    assert [c.offering.zone for c in launches(plan.commands)] == ["use1-az2"]


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_a_gang_bears_the_whole_jobs_price_of_a_reclaim_on_every_node(nodes: int) -> None:
    """A gang of n nodes is reclaimed at n × the pool's hazard and every reclaim spends
    the whole job's slack, so each node-hour bears hazard × the job's price of one
    reclaim: the same verdict for any n when the price per reclaim is the same. (It
    was divided by n, so a gang took spot a single-node job with the same slack refused.)"""
    spot = offering("g5.xlarge", gpu="A10G", price=1.0, market=Market.SPOT, on_demand=3.0)
    od = offering("g5.xlarge", gpu="A10G", price=3.0)
    forecast = Forecast()  # AWS prior hazard 0.468/h per node
    knobs = Knobs(restart_delay_h=0.2)
    policy = SpotfleetPolicy(knobs)
    j = job(
        "g",
        resources={"gpus": 1, "nodes": nodes},
        deadline=(T0 + timedelta(hours=30)).isoformat(),
        expected_duration="24h",
    )
    shape = shape_of(j.spec, forecast)
    econ = economics_of(j, forecast, knobs)

    def verdict(value_per_h: float) -> str | None:
        # slack short (pressure 1), a reclaim costs 0.3 h of it
        slack = SlackOutlook(1.0, 5.0, 1.0, 1.0, value_per_h, 0.3, 0.5, 0.3)
        return policy._spot_worth(OfferingIndex([spot, od], forecast=forecast, knobs=knobs), shape, econ, {}, slack)

    # $4.50 a reclaim: 1 + 0.468·4.5 = $3.11 a node-hour before reclaims' restarts, above on-demand's $3
    refused = verdict(15.0)
    assert refused is not None and "reclaims priced with the slack" in refused
    assert verdict(0.0) is None  # slack worth nothing: spot at a third of on-demand
