"""An idle deadline job waits for a cheaper spot pool that is down instead of
bridging the outage in a dear one, while its slack is cheap (``SpotfleetPolicy._cheaper_pool_wait``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from rich.console import Console

from spotfleet.cli.explain import render
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import PoolAvailability
from spotfleet.policies.explain import explain_job
from spotfleet.policies.forecast import SpotSupply
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.slack import cheaper_pool_wait
from spotfleet.policies.spotfleet import SpotfleetPolicy, joint_outage_factor

from .builders import T0, job, launches, offering, snapshot


def _spot(zone: str, price: float, *, up: bool = True) -> Any:
    o = offering("a3", "H100", 8, price, market=Market.SPOT, zone=zone, on_demand=100.0)
    return o if up else replace(o, available=False)


def _plan(
    *, deadline_h: float, cheap_up: bool = False, dear: float = 70.0, down_h: float = 0.5, cheap_zones: int = 1
) -> Any:
    """A pending 48 h job (8 GPUs) with a dear zone up at ``dear``, ``cheap_zones``
    $15/h zones (down unless ``cheap_up``) whose outages last ``down_h`` on average
    and whose up runs last 20 h, and on-demand at $100/h; the controller watched 200 h."""
    j = job("d", deadline=(T0 + timedelta(hours=deadline_h)).isoformat(), expected_duration="48h",
            checkpoint={"interval": "30m"}, resources={"gpus": 8})  # fmt: skip
    cheap = [_spot("z-cheap" + ("" if n == 0 else str(n + 1)), 15.0, up=cheap_up) for n in range(cheap_zones)]
    offers = [_spot("z-dear", dear), *cheap, offering("a3", "H100", 8, 100.0, zone="z-od")]
    runs = 200.0 / (20.0 + down_h)
    seen = (
        PoolAvailability(offers[0].key, up_hours=200.0, down_hours=0.0, ended_runs=0, up_for_h=200.0),
        *(
            PoolAvailability(
                o.key,
                up_hours=200.0 - runs * down_h,
                down_hours=runs * down_h,
                ended_runs=int(runs),
                up_now=cheap_up,
                recent_runs_h=(20.0,) * 8,
            )
            for o in cheap
        ),
    )
    snap = snapshot(jobs=[j], offerings=offers, availability=seen)
    policy = SpotfleetPolicy(Knobs())
    return policy, snap, policy.plan(snap)


def test_with_slack_to_spare_the_job_waits_for_the_cheap_zone_instead_of_the_dear_one() -> None:
    policy, snap, result = _plan(deadline_h=72.0)
    assert launches(result.commands) == []
    assert result.markets["d"].markets == ()
    outcome = result.outcomes["d"]
    assert (outcome.status, outcome.code) == ("blocked", "waiting")
    assert "wait for cheaper spot" in outcome.reason and "z-dear" in outcome.reason
    shown = explain_job(snap, "d", policy=policy)
    assert shown.plan_code == "waiting" and "wait for cheaper spot" in shown.summary
    # no market this step, but the spot ranking it waits on is shown
    assert shown.markets == () and [row.zone for row in shown.top] == ["z-dear"]
    out = StringIO()
    render(shown.to_dict(), Console(file=out, width=200))
    assert "market: none this step — deadline: wait for cheaper spot" in out.getvalue()


def test_once_the_cheap_zone_is_back_the_job_starts_there() -> None:
    _, _, result = _plan(deadline_h=72.0, cheap_up=True)
    (launch,) = launches(result.commands)
    assert launch.offering.zone == "z-cheap"


def test_with_the_slack_short_the_dear_zone_is_taken() -> None:
    # 0.9 h of slack: under the 1.0 h at which an idle job may wait at all (``DeadlineThresholds.wait``
    # with the default 10 min restart and margin)
    _, _, result = _plan(deadline_h=48.9)
    (launch,) = launches(result.commands)
    assert launch.offering.zone == "z-dear" and launch.offering.market is Market.SPOT


def test_a_long_outage_of_the_cheap_zone_is_bridged_in_the_dear_one() -> None:
    # 4 h of slack over 48 h of work: ~22 reclaims expected at the AWS prior hazard (0.468/h) leave
    # little for a 3 h wait, so the slack is likely to bind and an hour of it costs more than the gap
    _, _, result = _plan(deadline_h=52.0, down_h=3.0)
    (launch,) = launches(result.commands)
    assert launch.offering.zone == "z-dear"


def test_a_gap_that_cannot_pay_a_restart_over_the_wait_is_not_waited_for() -> None:
    # $0.54 cheaper per useful hour, back in 1.9 h: $0.95 of gap over the wait against a $2.58 restart in the
    # dear zone. Slack to spare does not change it: the job's migration would not move it back for
    # such a gap either, so the wait would only spend slack (GCP development set, docs/simulator.md)
    _, _, free = _plan(deadline_h=72.0, dear=15.5, down_h=2.0)
    (launch,) = launches(free.commands)
    assert launch.offering.zone == "z-dear"
    _, _, wide = _plan(deadline_h=72.0, dear=30.0, down_h=2.0)
    assert wide.outcomes["d"].code == "waiting"


def test_the_scores() -> None:
    # a wait no longer than a restart costs no slack that the dear zone would not spend too
    assert cheaper_pool_wait(slack_value_per_h=1e6, wait_h=0.2, restart_h=0.2, gap_per_h=1.0,
                             up_price_per_h=2.0) == (0.0, 0.4)  # fmt: skip
    wait, take = cheaper_pool_wait(slack_value_per_h=10.0, wait_h=1.2, restart_h=0.2, gap_per_h=55.0,
                                   up_price_per_h=70.0)  # fmt: skip
    assert (wait, take) == (10.0, 55.0 + 14.0)
    wait, take = cheaper_pool_wait(slack_value_per_h=80.0, wait_h=1.2, restart_h=0.2, gap_per_h=55.0,
                                   up_price_per_h=70.0)  # fmt: skip
    assert wait > take


def test_zones_down_together_are_expected_back_later_than_independent_ones() -> None:
    # two cheap zones down, each with the same record: independent exponentials would give
    # the first back after mean_down / 2; zones fail together, so the rule expects √2 times that
    assert [joint_outage_factor(k) for k in (1, 2, 4)] == [1.0, pytest.approx(2**0.5), 2.0]
    _, snap, result = _plan(deadline_h=72.0, cheap_zones=2, down_h=1.5)
    mean_down = SpotSupply.observed(snap.availability[1]).mean_down_h
    outcome = result.outcomes["d"]
    assert (outcome.status, outcome.code) == ("blocked", "waiting")
    assert "2 pool(s) down now" in outcome.reason
    assert f"expected back in {2**0.5 * mean_down / 2:.2f} h" in outcome.reason
    assert f"expected back in {mean_down / 2:.2f} h" not in outcome.reason
