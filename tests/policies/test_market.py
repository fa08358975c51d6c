"""Market policy (spot vs on-demand, Uniform Progress deadlines) and budgets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from spotfleet.model.instance import InstanceState
from spotfleet.model.job import Job
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Budget, Preempt
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import EITHER, ON_DEMAND_ONLY, SPOT_ONLY, decide_market
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, binds, instance, job, launches, offering, running, snapshot

KNOBS = Knobs()  # restart delay 10 min, margin = restart delay


def test_priority_classes_pick_markets() -> None:
    assert decide_market(job("c", priority="critical"), now=T0, expected_hours=1, knobs=KNOBS).markets == ON_DEMAND_ONLY
    assert decide_market(job("o", priority="opportunistic"), now=T0, expected_hours=1, knobs=KNOBS).markets == SPOT_ONLY
    assert decide_market(job("n"), now=T0, expected_hours=1, knobs=KNOBS).markets == EITHER


def _deadline_job(progress: float) -> Job:
    # submitted at T0, 4 h of work, due T0+10h, checkpoints every 30 min
    return job("d", deadline=(T0 + timedelta(hours=10)).isoformat(), expected_duration="4h",
               checkpoint={"interval": "30m"}, progress={"fraction": progress})  # fmt: skip


def test_deadline_job_switches_to_on_demand_exactly_when_slack_runs_out() -> None:
    # 95 % done → 12 min of work left; one interruption costs 10 min restart + 30 min of work
    # since the last checkpoint = 40 min. slack = time left − 12 min: spot while slack > 40 min,
    # on-demand from time left = 52 min.
    d = _deadline_job(0.95)
    deadline = T0 + timedelta(hours=10)
    before = decide_market(d, now=deadline - timedelta(minutes=52, seconds=1), expected_hours=4, knobs=KNOBS)
    at = decide_market(d, now=deadline - timedelta(minutes=52), expected_hours=4, knobs=KNOBS)
    assert before.markets == SPOT_ONLY
    assert at.markets == ON_DEMAND_ONLY and at.urgent
    assert "slack" in at.reason


def test_deadline_job_behind_uniform_progress_goes_on_demand() -> None:
    # at T0+5h the schedule expects 4 × 5/10 = 2 h done; 1.5 h done is behind by more than the margin
    d = _deadline_job(1.5 / 4)
    decision = decide_market(d, now=T0 + timedelta(hours=5), expected_hours=4, knobs=KNOBS)
    assert decision.markets == ON_DEMAND_ONLY and "behind" in decision.reason
    # 1.9 h done is within the 10-minute margin: still spot
    d = _deadline_job(1.9 / 4)
    assert decide_market(d, now=T0 + timedelta(hours=5), expected_hours=4, knobs=KNOBS).markets == SPOT_ONLY


def test_hysteresis_keeps_on_demand_until_safely_ahead() -> None:
    # 2.1 h done vs 2 h expected: ahead, but not by the margin (10 min) → stays on on-demand
    d = _deadline_job(2.1 / 4)
    now = T0 + timedelta(hours=5)
    stay = decide_market(d, now=now, expected_hours=4, knobs=KNOBS, last_market=Market.ON_DEMAND)
    assert stay.markets == ON_DEMAND_ONLY and "hysteresis" in stay.reason
    assert decide_market(d, now=now, expected_hours=4, knobs=KNOBS, last_market=Market.SPOT).markets == SPOT_ONLY
    # 2.2 h done: ahead by 12 min > margin → back to spot
    d = _deadline_job(2.2 / 4)
    back = decide_market(d, now=now, expected_hours=4, knobs=KNOBS, last_market=Market.ON_DEMAND)
    assert back.markets == SPOT_ONLY


def test_deadline_without_known_duration_runs_on_demand() -> None:
    d = job("d", deadline=(T0 + timedelta(hours=10)).isoformat())
    assert decide_market(d, now=T0, expected_hours=None, knobs=KNOBS).markets == ON_DEMAND_ONLY


def test_deadline_job_moves_region_when_spot_dries_up() -> None:
    east = offering("g5.xlarge", "A10G", 1, 0.30, market=Market.SPOT, on_demand=1.0)
    west = offering("g5.xlarge", "A10G", 1, 0.35, market=Market.SPOT, on_demand=1.0, region="us-west-2",
                    zone="usw2-az1")  # fmt: skip
    od = offering("g5.xlarge", "A10G", 1, 1.00)
    d = _deadline_job(0.0)
    snap = snapshot(jobs=[d], offerings=[east, west, od], unavailable={east.key: T0 + timedelta(minutes=3)})
    (launch,) = launches(SpotfleetPolicy().decide(snap))
    assert launch.offering is west


def test_opportunistic_job_waits_instead_of_falling_back_to_on_demand() -> None:
    spot = offering("g5.xlarge", "A10G", 1, 0.30, market=Market.SPOT, on_demand=1.0)
    od = offering("g5.xlarge", "A10G", 1, 1.00)
    snap = snapshot(jobs=[job("o", priority="opportunistic"), job("n")], offerings=[spot, od],
                    unavailable={spot.key: T0 + timedelta(minutes=3)})  # fmt: skip
    cmds = SpotfleetPolicy().decide(snap)
    assert set(binds(cmds)) == {"n"}  # normal falls back to on-demand; opportunistic waits
    assert [lc.offering for lc in launches(cmds)] == [od]


def test_global_budget_is_never_exceeded_and_lower_priority_waits() -> None:
    box = offering("g5.xlarge", "A10G", 1, 3.0)
    existing = instance("i1", offering("g5.xlarge", "A10G", 1, 4.0), state=InstanceState.RUNNING)
    busy = running("r1", existing, (0,), priority="critical")
    jobs = [job("opp", priority="normal", created=T0 - timedelta(hours=2)),
            job("crit1", priority="critical"), job("crit2", priority="critical")]  # fmt: skip
    # spend $4/h now; cap $10/h → room for two $3/h launches, and the critical jobs come first
    snap = snapshot(jobs=[busy, *jobs], instances=[existing], offerings=[box], budgets=(Budget(10.0),))
    cmds = SpotfleetPolicy().decide(snap)
    assert len(launches(cmds)) == 2
    assert set(binds(cmds)) == {"crit1", "crit2"}
    spend = 4.0 + sum(lc.offering.price_per_hour for lc in launches(cmds))
    assert spend <= 10.0


def test_tenant_budget_caps_that_tenant_only() -> None:
    box = offering("g5.xlarge", "A10G", 1, 3.0)
    jobs = [job(f"a{i}", tenant="alpha", priority="critical") for i in range(3)]
    jobs += [job(f"b{i}", tenant="beta", priority="critical") for i in range(3)]
    snap = snapshot(jobs=jobs, offerings=[box], budgets=(Budget(7.0, tenant="alpha"),))
    placed = set(binds(SpotfleetPolicy().decide(snap)))
    assert placed == {"a0", "a1", "b0", "b1", "b2"}  # alpha: 2 × $3 ≤ $7 < 3 × $3


def test_running_deadline_job_moves_off_spot_while_a_planned_move_still_fits() -> None:
    spot = instance("spot", offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0))
    deadline = T0 + timedelta(hours=10)

    def on_spot(now_left_min: float) -> list[Any]:
        j = running("d", spot, (0,), deadline=deadline.isoformat(), expected_duration="4h",
                    checkpoint={"interval": "30m"}, progress={"fraction": 0.95})  # fmt: skip
        now = deadline - timedelta(minutes=now_left_min)
        return [c for c in SpotfleetPolicy().decide(snapshot(jobs=[j], instances=[spot], offerings=[], now=now))
                if isinstance(c, Preempt)]  # fmt: skip

    # 12 min of work left; interruption = 10 + 30 min; planned move = 10 min
    assert on_spot(53) == []  # slack 41 min: an interruption is still survivable
    assert [p.job_id for p in on_spot(52)] == ["d"]  # slack 40 min: move now
    assert [p.job_id for p in on_spot(23)] == ["d"]  # slack 11 min: a move still fits
    assert on_spot(22) == []  # slack 10 min: too late to move, stay and hope


def test_running_deadline_job_without_progress_is_left_alone() -> None:
    spot = instance("spot", offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0))
    j = running("d", spot, (0,), deadline=(T0 + timedelta(minutes=30)).isoformat(), expected_duration="4h")
    assert not [c for c in SpotfleetPolicy().decide(snapshot(jobs=[j], instances=[spot], offerings=[]))
                if isinstance(c, Preempt)]  # fmt: skip
