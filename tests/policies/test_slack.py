"""The slack outlook (policies/slack.py) and the learned spot supply it reads (forecast.SpotSupply)."""

from __future__ import annotations

import math

from spotfleet.model.snapshot import PoolAvailability
from spotfleet.policies.forecast import PRIOR_DOWN_RUN_H, PRIOR_UP_RUN_H, SpotSupply, remaining_life
from spotfleet.policies.slack import outlook, return_to_spot_pays, spot_hours_per_slack_hour

ALWAYS = SpotSupply(availability=1.0, mean_up_h=10.0, mean_down_h=0.0)


def test_need_is_a_compound_poisson_of_restarts_and_waits() -> None:
    # 40 h of work at 0.3 reclaims/h: 12 reclaims of a 0.2 h restart each, spot always somewhere
    o = outlook(spendable_h=10.0, work_left_h=40.0, hazard_per_h=0.3, supply=ALWAYS, restart_h=0.2, premium_per_h=60.0)
    assert math.isclose(o.need_mean_h, 12 * 0.2) and math.isclose(o.need_sd_h, math.sqrt(12 * 0.04))
    assert o.pressure < 1e-6 and o.value_per_h < 1e-3  # 10 h of slack against 2.4 ± 0.7 h: plenty
    # when half the time no zone has spot, each reclaim also waits (mean down run 1 h) half the time
    flaky = SpotSupply(availability=0.5, mean_up_h=1.0, mean_down_h=1.0)
    o2 = outlook(spendable_h=10.0, work_left_h=40.0, hazard_per_h=0.3, supply=flaky, restart_h=0.2, premium_per_h=60.0)
    assert math.isclose(o2.reclaim_cost_h, 0.2 + 0.5 * 1.0) and math.isclose(o2.need_mean_h, 12 * 0.7)
    assert 0.2 < o2.pressure < 0.5  # 8.4 ± 3 h against 10 h
    # an hour of slack: P(runs out) × premium × the spot it buys: runs of e^{-0.06}/0.3 = 3.14 h usable
    # for 0.2 + 0.7 h of slack per attempt
    assert math.isclose(o2.value_per_h, o2.pressure * 60.0 * math.exp(-0.06) / 0.3 / 0.9)


def test_an_hour_of_short_slack_is_worth_the_spot_attempts_it_buys() -> None:
    """``spot_hours_per_slack_hour``: once the slack binds, an hour of it pays for
    spot attempts, each a usable run against its restart and reclaim; never less
    than the hour of on-demand it saves at the end."""
    assert math.isclose(spot_hours_per_slack_hour(0.5, 0.2, 0.2, 40.0), math.exp(-0.1) / 0.5 / 0.4)  # 1.81 h per 0.4 h
    assert spot_hours_per_slack_hour(0.5, 0.2, 0.2, 1.0) == 1.0 / 0.4  # the run is capped by the work left
    assert spot_hours_per_slack_hour(6.0, 0.2, 0.2, 40.0) == 1.0  # runs shorter than an attempt's cost: floor 1
    assert spot_hours_per_slack_hour(0.0, 0.2, 0.2, 8.0) == 8.0 / 0.4  # no reclaims known: the work left
    assert spot_hours_per_slack_hour(0.5, 0.0, 0.0, 8.0) == 1.0  # attempts cost no slack: an hour is an hour
    short = outlook(spendable_h=0.5, work_left_h=40.0, hazard_per_h=0.5, supply=ALWAYS, restart_h=0.2,
                    premium_per_h=10.0)  # fmt: skip
    assert short.pressure > 0.99 and math.isclose(short.value_per_h, short.pressure * 10.0 * math.exp(-0.1) / 0.5 / 0.4)


def test_a_reclaim_into_a_long_outage_costs_a_round_trip_once_the_slack_binds() -> None:
    """When the rule would cover an outage on on-demand (P(runs out) ≥ ½ and outages
    longer than a round trip, 2d), a reclaim is priced at its restart plus, when no
    zone has spot, the round trip: not the wait a spot-only path would sit through."""
    bad = SpotSupply(availability=0.4, mean_up_h=2.0, mean_down_h=3.0)
    tight = outlook(spendable_h=2.0, work_left_h=40.0, hazard_per_h=0.5, supply=bad, restart_h=0.2, premium_per_h=2.0)
    assert tight.pressure >= 0.5
    assert math.isclose(tight.reclaim_cost_h, 0.2 + 0.6 * 3.0)  # the spot-only path waits out the outage
    assert math.isclose(tight.reclaim_slack_h, 0.2 + 0.6 * 0.4)  # the rule takes on-demand: a round trip
    # k: one attempt spends its restart and its reclaim's priced slack
    assert math.isclose(tight.value_per_h, tight.pressure * 2.0 * math.exp(-0.1) / 0.5 / (0.2 + 0.44))
    roomy = outlook(spendable_h=500.0, work_left_h=40.0, hazard_per_h=0.5, supply=bad, restart_h=0.2,
                    premium_per_h=2.0)  # fmt: skip
    assert roomy.pressure < 0.5 and roomy.reclaim_slack_h == roomy.reclaim_cost_h  # slack to spare: it waits
    brief = SpotSupply(availability=0.4, mean_up_h=2.0, mean_down_h=0.3)  # outages shorter than 2d: it waits
    short = outlook(spendable_h=0.5, work_left_h=40.0, hazard_per_h=0.5, supply=brief, restart_h=0.2,
                    premium_per_h=2.0)  # fmt: skip
    assert short.pressure >= 0.5 and short.reclaim_slack_h == short.reclaim_cost_h


def test_pressure_grows_as_the_slack_shrinks() -> None:
    def p(spendable: float) -> float:
        return outlook(spendable_h=spendable, work_left_h=40.0, hazard_per_h=0.3, supply=ALWAYS, restart_h=0.2,
                       premium_per_h=60.0).pressure  # fmt: skip

    assert p(5.0) < p(2.4) < p(1.0) and math.isclose(p(2.4), 0.5)
    assert p(-0.1) == 1.0  # nothing left to spend


def test_an_idle_job_first_waits_out_the_current_outage() -> None:
    supply = SpotSupply(availability=0.8, mean_up_h=4.0, mean_down_h=1.5)
    busy = outlook(spendable_h=3.0, work_left_h=10.0, hazard_per_h=0.25, supply=supply, restart_h=0.2,
                   premium_per_h=2.0)  # fmt: skip
    idle = outlook(spendable_h=3.0, work_left_h=10.0, hazard_per_h=0.25, supply=supply, restart_h=0.2,
                   premium_per_h=2.0, idle_without_spot=True)  # fmt: skip
    assert math.isclose(idle.need_mean_h - busy.need_mean_h, 0.2 + 1.5) and idle.outage_h == 1.5


def test_returning_to_spot_must_pay_for_its_restarts_and_slack() -> None:
    tight = outlook(spendable_h=0.5, work_left_h=20.0, hazard_per_h=0.5, supply=ALWAYS, restart_h=0.2,
                    premium_per_h=2.0)  # fmt: skip
    gain, cost = return_to_spot_pays(tight, premium_per_h=2.0, spot_price=1.0, hazard_per_h=0.5, work_left_h=20.0,
                                     restart_h=0.2)  # fmt: skip
    assert math.isclose(gain, 2.0 * (2.0 - 0.2))  # the premium over the spot run's expected 2 h, less a restart
    assert math.isclose(cost, 0.2 * 1.0 + tight.value_per_h * (0.2 + tight.reclaim_cost_h))
    short = return_to_spot_pays(tight, premium_per_h=2.0, spot_price=1.0, hazard_per_h=4.0, work_left_h=20.0,
                                restart_h=0.2)  # fmt: skip
    assert short[0] < short[1]  # 15 min runs: the restarts eat the saving


def test_supply_is_the_prior_run_plus_what_was_seen() -> None:
    prior = SpotSupply.observed(None)
    assert math.isclose(prior.mean_up_h, PRIOR_UP_RUN_H) and math.isclose(prior.mean_down_h, PRIOR_DOWN_RUN_H)
    seen = SpotSupply.observed(PoolAvailability("k", up_hours=97.1, down_hours=8.85, ended_runs=9, up_now=False))
    assert math.isclose(seen.mean_up_h, 10.0) and math.isclose(seen.mean_down_h, 1.0) and not seen.up_now
    assert math.isclose(seen.availability, 100 / 110)


def test_remaining_life_reads_the_runs_longer_than_the_current_age() -> None:
    bursty = [0.1] * 8 + [10.0] * 2  # blips and long runs
    just_up = remaining_life(bursty, 0.0)
    settled = remaining_life(bursty, 1.0)
    assert just_up < 3.0 < settled  # a pool just back up is likely a blip; one up for an hour likely lasts
    assert math.isclose(settled, (PRIOR_UP_RUN_H + 2 * 9.0) / 3)
    assert math.isclose(remaining_life([], 5.0), PRIOR_UP_RUN_H)  # no history: the prior, memoryless


def test_an_idle_deadline_job_without_spot_waits_or_buys_on_demand_by_the_outlook() -> None:
    from datetime import timedelta

    from spotfleet.policies.knobs import Knobs
    from spotfleet.policies.market import ON_DEMAND_ONLY, SPOT_ONLY, decide_market

    from .builders import T0, job

    d = job("d", deadline=(T0 + timedelta(hours=30)).isoformat(), expected_duration="20h",
            checkpoint={"interval": "30m"})  # fmt: skip
    knobs = Knobs(restart_delay_h=0.2)

    def decide(spendable: float, outage_h: float) -> object:
        supply = SpotSupply(availability=0.7, mean_up_h=2.0, mean_down_h=outage_h)
        slack = outlook(spendable_h=spendable, work_left_h=20.0, hazard_per_h=0.5, supply=supply, restart_h=0.2,
                        premium_per_h=2.0, idle_without_spot=True)  # fmt: skip
        return decide_market(d, now=T0, expected_hours=20, knobs=knobs, spot_available=False, slack=slack)

    behind = decide(1.0, outage_h=1.0)  # ~6 h of waits and restarts expected against 1 h: behind
    assert behind.markets == ON_DEMAND_ONLY and "on-demand until spot returns" in behind.reason
    assert decide(100.0, outage_h=1.0).markets == SPOT_ONLY  # slack to spare: wait for spot
    assert decide(1.0, outage_h=0.3).markets == SPOT_ONLY  # outages shorter than a round trip (2 × 0.2 h)


def test_slack_pace_is_uniform_progress_written_in_slack() -> None:
    from datetime import timedelta

    from spotfleet.policies.spotfleet import slack_pace

    from .builders import T0, job

    # 40 h window for 30 h of work: 10 h of slack at submission, spent evenly: 5 h left at half-time
    d = job("d", deadline=(T0 + timedelta(hours=40)).isoformat(), expected_duration="30h",
            progress={"fraction": 0.5})  # fmt: skip
    half = T0 + timedelta(hours=20)  # 15 h done in 20 h: slack 5 h, exactly on the line
    assert abs(slack_pace(d, now=half, expected_hours=30.0) or 0.0) < 1e-9
    assert (slack_pace(d, now=half + timedelta(hours=1), expected_hours=30.0) or 0.0) < 0  # idle an hour: behind
    # "ahead by 2 restarts": the line 0.4 h later is 0.1 h lower
    assert abs((slack_pace(d, now=half, expected_hours=30.0, ahead_h=0.4) or 0.0) - 0.1) < 1e-9


def test_the_outage_rule_waits_for_the_market_not_for_our_own_fleet() -> None:
    """No spot slot for a deadline job because our own instances hold them is not an outage:
    the job waits for room like any other; only a market that is down sends it to on-demand."""
    from dataclasses import replace
    from datetime import timedelta

    from spotfleet.model.offering import Market
    from spotfleet.model.snapshot import PoolAvailability, spot_market_key
    from spotfleet.policies.market import ON_DEMAND_ONLY, SPOT_ONLY
    from spotfleet.policies.spotfleet import SpotfleetPolicy

    from .builders import T0, job, offering, snapshot

    spot = replace(offering("g5.xlarge", "A10G", 1, 0.4, market=Market.SPOT, on_demand=1.2), available=False)
    od = offering("g5.xlarge", "A10G", 1, 1.2)
    # 20 h of work due in 21.5 h, in a flapping market (1 h up / 1 h down): the slack will run out waiting
    d = job("d", deadline=(T0 + timedelta(hours=21.5)).isoformat(), expected_duration="20h",
            resources={"gpus": 1}, checkpoint={"interval": "30m"})  # fmt: skip

    def market(up_now: bool) -> tuple[str, ...]:
        seen = PoolAvailability(spot_market_key(spot), up_hours=10.0, down_hours=10.0, ended_runs=10, up_now=up_now)
        snap = snapshot(jobs=[d], offerings=[spot, od])
        snap.availability = (seen,)
        return SpotfleetPolicy().plan(snap).markets["d"].markets

    assert market(up_now=False) == ON_DEMAND_ONLY  # the market is down: on-demand until spot returns
    assert market(up_now=True) == SPOT_ONLY  # its slots are ours (held): wait for room
