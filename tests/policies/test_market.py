"""Market policy (spot vs on-demand, slack-reserve deadlines, planned moves) and budgets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from spotfleet.model.events import NoticeKind
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Checkpoint, Job, JobState
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Budget, Drain, Preempt
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import EITHER, ON_DEMAND_ONLY, SPOT_ONLY, decide_market, notice_checkpoint_fits
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, binds, instance, job, launches, offering, running, snapshot

KNOBS = Knobs()  # restart delay 10 min, margin = restart delay
# the worst case: a notice checkpoint may fail, so a reclaim loses the 30 min since the last checkpoint
WORST = Knobs(trust_notice_checkpoint=False)


def test_priority_classes_pick_markets() -> None:
    assert decide_market(job("c", priority="critical"), now=T0, expected_hours=1, knobs=KNOBS).markets == ON_DEMAND_ONLY
    assert decide_market(job("o", priority="opportunistic"), now=T0, expected_hours=1, knobs=KNOBS).markets == SPOT_ONLY
    assert decide_market(job("n"), now=T0, expected_hours=1, knobs=KNOBS).markets == EITHER


def _deadline_job(progress: float) -> Job:
    # submitted at T0, 4 h of work, due T0+10h, checkpoints every 30 min
    return job("d", deadline=(T0 + timedelta(hours=10)).isoformat(), expected_duration="4h",
               checkpoint={"interval": "30m"}, progress={"fraction": progress})  # fmt: skip


# Thresholds of _deadline_job with WORST (restart d = 10 min, margin m = 10 min, checkpoint 30 min):
# reserve = d + 30 + m = 50 min, start = reserve + d = 60 min, back = start + m = 70 min,
# wait = back + d + m = 90 min.
# At 95 % done 12 min of work remain, so slack = time left − 12 min.
S = timedelta(seconds=1)


def _at(d: Job, left: timedelta, **kw: Any) -> Any:
    return decide_market(d, now=T0 + timedelta(hours=10) - left, expected_hours=4, knobs=WORST, **kw)


def test_idle_deadline_job_waits_for_spot_when_on_demand_would_be_final() -> None:
    # below wait (90 min) a fallback to on-demand could never come back: wait for spot until start
    d = _deadline_job(0.95)  # queued since T0: idle for hours
    wait_edge = timedelta(minutes=102)  # slack 90 min = wait
    below = _at(d, wait_edge - S, spot_available=False)
    assert below.markets == SPOT_ONLY and "final" in below.reason
    assert _at(d, wait_edge - S, spot_available=True).markets == SPOT_ONLY
    # at wait, with no reclaims expected (hazard 0): plenty of slack, keep waiting
    assert _at(d, wait_edge + S, spot_available=False).markets == SPOT_ONLY
    # with reclaims expected, slack is scarce: after a round trip's worth of idling → on-demand
    scarce = _at(d, wait_edge + S, spot_available=False, spot_hazard_per_h=0.5)
    assert scarce.markets == ON_DEMAND_ONLY and not scarce.urgent


def test_ski_rental_waits_a_round_trip_for_spot_then_goes_on_demand() -> None:
    # 5 h left, 2 h of 4 done: slack 3 h; 2 h of work left at 0.5 reclaims/h expect 1 reclaim,
    # worth a round trip (20 min): plenty = 90 + 20 min < 3 h → waits for spot
    deadline = T0 + timedelta(hours=10)
    now = deadline - timedelta(hours=5)

    def queued_for(minutes: float, *, done: float, hazard: float) -> Any:
        d = job("d", deadline=deadline.isoformat(), expected_duration="4h", checkpoint={"interval": "30m"},
                progress={"fraction": done / 4}, since=now - timedelta(minutes=minutes))  # fmt: skip
        return decide_market(d, now=now, expected_hours=4, knobs=WORST, spot_available=False,
                             spot_hazard_per_h=hazard)  # fmt: skip

    assert queued_for(60, done=2, hazard=0.5).markets == SPOT_ONLY
    # 0.7 h done: slack 1.7 h < plenty 90 + 33 min → ski rental: wait 2 restarts (20 min), then on-demand
    assert queued_for(19, done=0.7, hazard=0.5).markets == SPOT_ONLY
    gone = queued_for(21, done=0.7, hazard=0.5)
    assert gone.markets == ON_DEMAND_ONLY and "until spot returns" in gone.reason


def test_trusting_the_notice_checkpoint_reserves_only_restarts() -> None:
    # the default: a reclaim costs a restart, so start = 2 restarts + margin = 30 min of slack
    d = _deadline_job(0.95)
    now = T0 + timedelta(hours=10) - timedelta(minutes=42)
    assert decide_market(d, now=now - S, expected_hours=4, knobs=KNOBS, spot_available=True).markets == SPOT_ONLY
    assert decide_market(d, now=now + S, expected_hours=4, knobs=KNOBS, spot_available=True).markets == ON_DEMAND_ONLY


def test_deadline_job_goes_on_demand_exactly_when_a_spot_start_could_not_survive_a_reclaim() -> None:
    d = _deadline_job(0.95)
    start_edge = timedelta(minutes=72)  # slack 60 min = restart + reserve
    assert _at(d, start_edge + S, spot_available=True).markets == SPOT_ONLY
    at = _at(d, start_edge - S, spot_available=True)
    assert at.markets == ON_DEMAND_ONLY and at.urgent and "slack" in at.reason


def test_idle_deadline_job_never_goes_on_demand_early_when_behind_a_uniform_line() -> None:
    # 1.5 h of 4 done at T0+5h is behind uniform progress (2 h), but 3.5 h of slack remain: wait for spot
    d = _deadline_job(1.5 / 4)
    decision = decide_market(d, now=T0 + timedelta(hours=5), expected_hours=4, knobs=WORST, spot_available=False)
    assert decision.markets == SPOT_ONLY


def test_deadline_without_known_duration_runs_on_demand() -> None:
    d = job("d", deadline=(T0 + timedelta(hours=10)).isoformat())
    assert decide_market(d, now=T0, expected_hours=None, knobs=KNOBS).markets == ON_DEMAND_ONLY


def test_deadline_job_moves_region_when_spot_dries_up() -> None:
    # priced alike: were the dry zone cheaper, a job with this much slack would wait for it
    # (tests/policies/test_cheaper_pool_wait.py)
    east = offering("g5.xlarge", "A10G", 1, 0.30, market=Market.SPOT, on_demand=1.0)
    west = offering("g5.xlarge", "A10G", 1, 0.30, market=Market.SPOT, on_demand=1.0, region="us-west-2",
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


def _moves(cmds: list[Any]) -> list[Any]:
    return [c for c in cmds if isinstance(c, Preempt | Drain)]


def test_running_deadline_job_moves_off_spot_while_a_planned_move_still_fits() -> None:
    spot = instance("spot", offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0))
    deadline = T0 + timedelta(hours=10)

    def on_spot(left: timedelta) -> list[Any]:
        j = running("d", spot, (0,), deadline=deadline.isoformat(), expected_duration="4h",
                    checkpoint={"interval": "30m"}, progress={"fraction": 0.95})  # fmt: skip
        snap = snapshot(jobs=[j], instances=[spot], offerings=[], now=deadline - left)
        return _moves(SpotfleetPolicy(WORST).decide(snap))

    # 12 min of work left; reserve = 10 min restart + 30 min since the checkpoint + 10 min margin
    assert on_spot(timedelta(minutes=62) + S) == []  # slack 50 min: a reclaim is still survivable
    (move,) = on_spot(timedelta(minutes=62) - S)  # below the reserve: move now
    assert isinstance(move, Drain) and move.instance_id == "spot"  # alone on it: drained, then given back
    assert move.kind is None  # a planned move, not a notice
    assert len(on_spot(timedelta(minutes=22) + S)) == 1  # slack just over 10 min: a move still fits
    assert on_spot(timedelta(minutes=22) - S) == []  # under a restart: too late to move, stay and hope


def test_the_reserve_holds_the_interval_where_the_checkpoint_outlasts_the_cloud_notice() -> None:
    # A 60 s checkpoint fits AWS's 120 s notice and not GCP's 30 s: the same job on the same
    # slack stays on AWS spot and moves off GCP spot (default knobs: derived per cloud).
    deadline = T0 + timedelta(hours=10)

    def moves(provider: str, took: str | None, knobs: Knobs = KNOBS) -> list[Any]:
        spot = instance("spot", offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0,
                                         provider=provider))  # fmt: skip
        checkpoint = {"interval": "30m"} | ({"duration": took} if took else {})
        j = running("d", spot, (0,), deadline=deadline.isoformat(), expected_duration="4h",
                    checkpoint=checkpoint, progress={"fraction": 0.95})  # fmt: skip
        # 12 min of work left, slack 40 min: above d + m = 20 min, below d + 30 + m = 50 min
        snap = snapshot(jobs=[j], instances=[spot], offerings=[], now=deadline - timedelta(minutes=52))
        return _moves(SpotfleetPolicy(knobs).decide(snap))

    assert moves("aws", "60s") == []
    (move,) = moves("gcp", "60s")
    assert isinstance(move, Drain) and "covers a planned move: to on-demand" in move.reason
    assert moves("gcp", "30s") == []  # fits the 30 s notice exactly
    assert moves("gcp", None) == []  # unknown: assumed to fit, as before
    assert moves("local", "60s") != []  # a cloud of unknown notice gets the shortest known
    assert moves("gcp", "60s", Knobs(trust_notice_checkpoint=True)) == []  # the knob overrides both ways
    assert moves("aws", None, WORST) != []


def test_leaving_spot_weighs_the_work_at_risk_since_the_last_checkpoint() -> None:
    # The GCP job above (a 60 s save on a 30 s notice, slack 40 min, d = m = 10 min): a
    # reclaim throws away the work since its last checkpoint, not always the whole
    # 30 min interval. It leaves once that work passes 40 − d − m = 20 min.
    deadline = T0 + timedelta(hours=10)
    spot = instance("spot", offering("a3-highgpu-8g", "H100", 8, 30.0, market=Market.SPOT, on_demand=88.0,
                                     provider="gcp"))  # fmt: skip

    def moves(progress: dict[str, Any], checkpoint_step: int | None) -> list[Any]:
        j = running("d", spot, (0,), deadline=deadline.isoformat(), expected_duration="4h",
                    checkpoint={"interval": "30m", "duration": "60s"}, progress=progress)  # fmt: skip
        if checkpoint_step is not None:
            j.checkpoint = Checkpoint(f"gs://c/{checkpoint_step}", checkpoint_step, T0, j.attempt)
        snap = snapshot(jobs=[j], instances=[spot], offerings=[], now=deadline - timedelta(minutes=52))
        return _moves(SpotfleetPolicy(KNOBS).decide(snap))

    done = {"fraction": 0.95, "step": 2280}  # 228 min of 240 done; a step a tenth of a minute
    assert moves(done, 2280 - 50) == [], "5 min since the checkpoint: a reclaim costs 5 min + d, it fits"
    assert moves(done, 2280 - 190) == [], "19 min at risk: still inside the reserve"
    (move,) = moves(done, 2280 - 210)  # 21 min at risk: over it
    assert isinstance(move, Drain) and "covers a planned move: to on-demand" in move.reason
    assert moves(done, None) != [], "no checkpoint yet: everything done is at risk"
    assert moves({"fraction": 0.95}, 2000) != [], "no step reported: the whole interval, as before"


def test_notice_checkpoint_fits_against_the_shortest_notice_of_the_clouds_given() -> None:
    slow = job("s", checkpoint={"duration": "90s"}).spec
    assert notice_checkpoint_fits(slow, ["aws"], KNOBS)
    assert not notice_checkpoint_fits(slow, ["aws", "gcp"], KNOBS)  # may land on GCP: not trusted
    assert not notice_checkpoint_fits(slow, [], KNOBS)  # no cloud known: the shortest notice
    assert notice_checkpoint_fits(job("q").spec, ["gcp"], KNOBS)  # no duration declared
    # no spec to derive it from (a caller ranking offerings alone): the knob, unset = it fits
    assert notice_checkpoint_fits(None, ["gcp"], KNOBS)
    assert not notice_checkpoint_fits(None, ["aws"], WORST)
    assert notice_checkpoint_fits(None, ["gcp"], Knobs(trust_notice_checkpoint=True))


def _on_demand_job(left: timedelta, *, fraction: float = 0.95) -> tuple[Job, Instance, Any]:
    od = instance("od", offering("g5.xlarge", "A10G", 1, 1.0))
    deadline = T0 + timedelta(hours=10)
    j = running("d", od, (0,), deadline=deadline.isoformat(), expected_duration="4h",
                checkpoint={"interval": "30m"}, progress={"fraction": fraction, "market": "on_demand"})  # fmt: skip
    return j, od, deadline - left


def test_running_on_demand_deadline_job_returns_to_spot_when_the_slack_covers_it() -> None:
    spot = offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0)
    od_offer = offering("g5.xlarge", "A10G", 1, 1.0)

    def moves(left: timedelta, *, spot_usable: bool = True, fraction: float = 0.75) -> list[Any]:
        j, od, now = _on_demand_job(left, fraction=fraction)
        unavailable = {} if spot_usable else {spot.key: now + timedelta(minutes=3)}
        snap = snapshot(jobs=[j], instances=[od], offerings=[spot, od_offer], now=now, unavailable=unavailable)
        return _moves(SpotfleetPolicy(WORST).decide(snap))

    # 1 h of work left; back = 70 min of slack: the move (10) + a reclaim's loss (30) + an on-demand
    # restart (10) + 2 margins (20)
    (back,) = moves(timedelta(minutes=130) + S)
    assert isinstance(back, Drain) and back.instance_id == "od" and "back to spot" in back.reason
    assert "saves" in back.reason  # the move pays for its restarts and the slack they spend
    assert moves(timedelta(minutes=130) - S) == []  # hysteresis: not enough to come back
    assert moves(timedelta(hours=5), spot_usable=False) == []  # no spot anywhere: stay
    # 12 min of work left: a 10 min restart on spot cannot save what it costs (on-demand finishes it)
    assert moves(timedelta(hours=5), fraction=0.95) == []


def test_a_shared_on_demand_instance_is_not_drained_for_one_jobs_move() -> None:
    spot = offering("g5.xlarge", "A10G", 2, 0.3, market=Market.SPOT, on_demand=1.0)
    od = instance("od", offering("g5.xlarge", "A10G", 2, 1.0))
    deadline = T0 + timedelta(hours=10)
    j = running("d", od, (0,), deadline=deadline.isoformat(), expected_duration="4h",
                checkpoint={"interval": "30m"}, progress={"fraction": 0.5})  # fmt: skip
    other = running("n", od, (1,))
    (move,) = _moves(SpotfleetPolicy(KNOBS).decide(snapshot(jobs=[j, other], instances=[od], offerings=[spot])))
    assert isinstance(move, Preempt) and move.job_id == "d"


def test_requeued_move_lands_on_the_market_it_was_moved_for() -> None:
    """After a planned move the job is placed by the market rule, not back where it came from."""
    spot_offer = offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0)
    od_offer = offering("g5.xlarge", "A10G", 1, 1.0)
    idle_spot = instance("spot", spot_offer, idle_since=T0)
    idle_od = instance("od", od_offer, idle_since=T0)
    deadline = T0 + timedelta(hours=10)
    # moved off spot (slack 45 min < reserve): requeued, must land on on-demand, not the idle spot box
    off = job("d", deadline=deadline.isoformat(), expected_duration="4h", checkpoint={"interval": "30m"},
              progress={"fraction": 0.95, "market": "spot"})  # fmt: skip
    now = deadline - timedelta(minutes=57)
    cmds = SpotfleetPolicy(WORST).decide(snapshot(jobs=[off], instances=[idle_spot, idle_od],
                                                  offerings=[spot_offer, od_offer], now=now))  # fmt: skip
    assert binds(cmds)["d"].bindings[0].instance_id == "od"
    # moved back to spot (slack 75 min): lands on the idle spot box, not the on-demand one
    back = job("d", deadline=deadline.isoformat(), expected_duration="4h", checkpoint={"interval": "30m"},
               progress={"fraction": 0.95, "market": "on_demand"})  # fmt: skip
    now = deadline - timedelta(minutes=87)
    cmds = SpotfleetPolicy(WORST).decide(snapshot(jobs=[back], instances=[idle_spot, idle_od],
                                                  offerings=[spot_offer, od_offer], now=now))  # fmt: skip
    assert binds(cmds)["d"].bindings[0].instance_id == "spot"


def test_a_planned_drain_buys_no_replacement_but_a_reclaim_notice_does() -> None:
    spot_offer = offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0)
    od_offer = offering("g5.xlarge", "A10G", 1, 1.0)
    deadline = T0 + timedelta(hours=10)

    def draining(notice: NoticeKind | None) -> list[Any]:
        inst = instance("spot", spot_offer, state=InstanceState.DRAINING)
        inst.notice_kind = notice
        j = running("d", inst, (0,), state=JobState.DRAINING, deadline=deadline.isoformat(),
                    expected_duration="4h", checkpoint={"interval": "30m"}, progress={"fraction": 0.5})  # fmt: skip
        return launches(SpotfleetPolicy(KNOBS).decide(
            snapshot(jobs=[j], instances=[inst], offerings=[spot_offer, od_offer])))  # fmt: skip

    assert draining(None) == []  # the policy's own move: the requeued job is placed by its market rule
    (replacement,) = draining(NoticeKind.SPOT_INTERRUPTION)
    assert replacement.reserved_for == "d" and replacement.offering.market is Market.SPOT


def test_running_deadline_job_without_progress_is_left_alone() -> None:
    spot = instance("spot", offering("g5.xlarge", "A10G", 1, 0.3, market=Market.SPOT, on_demand=1.0))
    j = running("d", spot, (0,), deadline=(T0 + timedelta(minutes=30)).isoformat(), expected_duration="4h")
    assert not [c for c in SpotfleetPolicy().decide(snapshot(jobs=[j], instances=[spot], offerings=[]))
                if isinstance(c, Preempt)]  # fmt: skip
