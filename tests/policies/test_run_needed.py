"""The spot run a deadline job's slack can afford (slack.run_needed) and how the
policy uses it: a pool whose current run is expected to be shorter is not
entered while the slack is scarce; plenty of slack, or no evidence, refuses nothing."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

from spotfleet.model.offering import Market
from spotfleet.model.snapshot import PoolAvailability
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.market import ON_DEMAND_ONLY, SPOT_ONLY
from spotfleet.policies.selection import OfferingIndex
from spotfleet.policies.slack import run_needed
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, job, offering, snapshot


def test_each_start_must_buy_its_share_of_the_work_per_restart_of_slack() -> None:
    # 40 h of work, 2 h of slack to spend, 0.2 h per restart: 10 restarts → runs of 4 h on average
    assert math.isclose(run_needed(spendable_h=2.0, work_left_h=40.0, restart_h=0.2), 4.0)
    assert run_needed(spendable_h=20.0, work_left_h=40.0, restart_h=0.2) < 0.5  # plenty: short runs will do
    assert run_needed(spendable_h=0.0, work_left_h=40.0, restart_h=0.2) == math.inf  # nothing to spend
    assert run_needed(spendable_h=2.0, work_left_h=0.0, restart_h=0.2) == 0.0


FLAPPY = replace(offering("p3.2xlarge", "V100", 1, 0.9, market=Market.SPOT, on_demand=3.06, zone="use1-az1"))
STEADY = replace(offering("p3.2xlarge", "V100", 1, 1.2, market=Market.SPOT, on_demand=3.06, zone="use1-az2"))
OD = offering("p3.2xlarge", "V100", 1, 3.06, zone="use1-az1")


def blips(o: object, *, up_for_h: float = 0.0, run_h: float = 0.1) -> PoolAvailability:
    """A pool seen to flap: 20 runs of ``run_h`` hours, up again for ``up_for_h``."""
    return PoolAvailability(o.key, up_hours=20 * run_h, down_hours=10.0, ended_runs=20, up_now=True,  # type: ignore[attr-defined]
                            recent_runs_h=(run_h,) * 20, up_for_h=up_for_h)  # fmt: skip


def test_only_evidence_refuses_a_pool_and_a_run_that_has_lasted_counts() -> None:
    def index(*records: PoolAvailability) -> OfferingIndex:
        return OfferingIndex([FLAPPY, OD], forecast=Forecast(availability={r.key: r for r in records}), now=T0)

    assert index().lasts(FLAPPY, 10.0)  # nothing seen: the prior alone never refuses
    assert not index(blips(FLAPPY)).lasts(FLAPPY, 1.0)  # just back up after blips: expected ~0.2 h more
    assert index(blips(FLAPPY)).lasts(FLAPPY, 0.1)
    assert index(blips(FLAPPY, up_for_h=3.0)).lasts(FLAPPY, 2.5)  # up 3 h already: expected about as long again
    assert index(blips(FLAPPY)).lasts(OD, 100.0)  # on-demand is never refused


def deadline_job(slack_h: float, work_h: float = 40.0):  # type: ignore[no-untyped-def]
    return job("d", deadline=(T0 + timedelta(hours=work_h + slack_h)).isoformat(), expected_duration=f"{work_h}h",
               resources={"gpus": 1}, checkpoint={"interval": "30m"})  # fmt: skip


def plan(slack_h: float, *records: PoolAvailability, offerings: tuple = (FLAPPY, OD)):  # type: ignore[no-untyped-def]
    snap = snapshot(jobs=[deadline_job(slack_h)], offerings=list(offerings))
    snap.availability = records
    return SpotfleetPolicy().plan(snap)


def test_a_scarce_slack_is_not_spent_on_runs_shorter_than_its_share() -> None:
    # 3 h of slack for 40 h of work: each start must buy over 2.5 h of spot (W·d over the spendable slack);
    # the pool's runs last 1 h — cheap enough per useful hour, but ten of them would spend the slack by hour 12
    scarce = plan(3.0, blips(FLAPPY, run_h=1.0))
    assert scarce.markets["d"].markets == ON_DEMAND_ONLY
    assert "expected to last" in scarce.markets["d"].reason
    # the same pool once its run has lasted 5 h: entered
    assert plan(3.0, blips(FLAPPY, run_h=1.0, up_for_h=5.0)).markets["d"].markets == SPOT_ONLY
    # 30 h of slack for the same work: 1 h runs pay their restart, spot
    assert plan(30.0, blips(FLAPPY, run_h=1.0)).markets["d"].markets == SPOT_ONLY


def test_the_placement_skips_the_cheap_flapping_pool_for_one_that_lasts() -> None:
    steady = PoolAvailability(STEADY.key, up_hours=40.0, down_hours=1.0, ended_runs=2, up_now=True,
                              recent_runs_h=(20.0, 20.0), up_for_h=1.0)  # fmt: skip
    scarce = plan(3.0, blips(FLAPPY, run_h=1.0), steady, offerings=(FLAPPY, STEADY, OD))
    assert scarce.markets["d"].markets == SPOT_ONLY
    assert [c.offering.zone for c in scarce.commands if hasattr(c, "offering")] == ["use1-az2"]
    # with plenty of slack the cheaper pool wins again
    plenty = plan(30.0, blips(FLAPPY, run_h=1.0), steady, offerings=(FLAPPY, STEADY, OD))
    assert [c.offering.zone for c in plenty.commands if hasattr(c, "offering")] == ["use1-az1"]
