"""Planned migration of a running deadline job on spot to a cheaper spot pool."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Drain, PoolAvailability, Preempt
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.spotfleet import SpotfleetPolicy, migration_gain

from .builders import T0, instance, offering, running, snapshot

KNOBS = Knobs()


def _spot(zone: str, price: float) -> Any:
    return offering("a3", "H100", 8, price, market=Market.SPOT, zone=zone, on_demand=90.0)


def _plan(
    *, here: float, there: float, fraction: float = 0.1, deadline_h: float = 52.0, there_up_h: float = 24.0, **kw: Any
) -> list[Any]:
    """The plan's moves for a job 10 % into 48 h of work on z-a's spot (on its
    instance for 4.8 h) while z-b's spot has been available ``there_up_h``."""
    cur = _spot("z-a", here)
    inst = instance("i1", cur, since=T0 - timedelta(hours=4.8))
    j = running("d", inst, tuple(range(8)), deadline=(T0 + timedelta(hours=deadline_h)).isoformat(),
                expected_duration="48h", checkpoint={"interval": "30m"},
                progress={"fraction": fraction, "market": "spot"}, resources={"gpus": 8}, created=T0 - timedelta(hours=4.8))  # fmt: skip
    offers = [_spot("z-a", here), _spot("z-b", there), offering("a3", "H100", 8, 90.0, zone="z-a")]
    seen = PoolAvailability(offers[1].key, up_hours=there_up_h, down_hours=0.0, ended_runs=0, up_for_h=there_up_h)
    snap = snapshot(jobs=[j], instances=[inst], offerings=offers, availability=(seen,))
    cmds = SpotfleetPolicy(Knobs(**kw)).decide(snap)
    return [c for c in cmds if isinstance(c, Drain | Preempt)]


def test_a_job_moves_to_a_much_cheaper_spot_zone_through_a_checkpoint_drain() -> None:
    (move,) = _plan(here=19.0, there=15.0, deadline_h=72.0)
    assert isinstance(move, Drain) and move.instance_id == "i1"
    assert "migrate" in move.reason and "z-b" in move.reason


def test_a_small_gap_does_not_pay_for_the_move() -> None:
    assert _plan(here=15.2, there=15.0, deadline_h=72.0) == []  # the saving does not cover the move's cost


def test_a_pool_back_for_a_moment_waits_until_the_gap_has_paid_for_the_move() -> None:
    """Ski rental: the move is made once the gap has cost the job as much as
    the move (here a restart of 10 min at $15/h and its slack: about $2.5),
    so a $4/h gap waits under an hour, not for a factor on the saving."""
    assert _plan(here=19.0, there=15.0, deadline_h=72.0, there_up_h=0.1) == []  # $0.4 forgone so far
    assert _plan(here=19.0, there=15.0, deadline_h=72.0, there_up_h=0.5) == []  # $2.0
    assert _plan(here=19.0, there=15.0, deadline_h=72.0, there_up_h=1.0) != []  # $4.0


def test_no_move_without_the_slack_for_it() -> None:
    # 48 h of work, 10 % done, 43.8 h left: slack 0.6 h; after the move's restart (10 min) it would
    # hold 0.43 h, under what a spot start needs (a restart and a reclaim's reserve: 0.5 h)
    assert _plan(here=19.0, there=15.0, deadline_h=43.8) == []
    # 52 h left: slack 8.8 h, but ~20 reclaims (prior hazard 0.47/h) and outages are expected over the
    # 43 h of work: the slack is more likely than not to run out, so the move's restart is priced at
    # the on-demand premium it may force and a $4/h gap no longer pays for it (policies/slack.py)
    assert _plan(here=19.0, there=15.0, deadline_h=52.0) == []
    assert _plan(here=19.0, there=15.0, deadline_h=72.0) != []  # 28.8 h of slack: the same move pays


def test_moves_per_plan_are_capped() -> None:
    assert _plan(here=19.0, there=15.0, max_migrations_per_plan=0) == []


def test_migration_gain_counts_lifetime_restart_and_hysteresis() -> None:
    base = dict(current_price=19.0, current_hazard=0.3, new_price=15.0, restart_h=0.2, forgone_h=24.0)
    saving, cost = migration_gain(**base, new_hazard=0.3, remaining_h=40.0) or (0.0, 0.0)
    # horizon = expected lifetime 1/0.3 h, not the 40 h of remaining work
    assert abs(saving - 4.0 * 1.06 / 0.3) < 1e-9 and abs(cost - 0.2 * 15.0) < 1e-9
    assert migration_gain(**base, new_hazard=0.3, remaining_h=1.0) is not None  # saves $4.24 against $3
    assert migration_gain(**base, new_hazard=0.3, remaining_h=0.5) is None  # too little work left to pay
    assert migration_gain(**base, new_hazard=6.0, remaining_h=40.0) is None  # lifetime 10 min < a 12 min restart
    assert migration_gain(**{**base, "new_price": 20.0}, new_hazard=0.3, remaining_h=40.0) is None
    # ski rental: a gap of 4 × 1.06 $/h has paid for a $3 move after 0.71 h, not before
    assert migration_gain(**{**base, "forgone_h": 0.7}, new_hazard=0.3, remaining_h=40.0) is None
    assert migration_gain(**{**base, "forgone_h": 0.72}, new_hazard=0.3, remaining_h=40.0) is not None


def test_spot_whose_expected_lifetime_is_shorter_than_a_restart_is_not_entered() -> None:
    from spotfleet.model.snapshot import Launch, PoolExposure

    from .builders import job

    spot = _spot("z-a", 15.0)
    od = offering("a3", "H100", 8, 90.0, zone="z-a")
    pending = job("d", deadline=(T0 + timedelta(hours=5)).isoformat(), expected_duration="4h",
                  checkpoint={"interval": "30m"}, resources={"gpus": 8}, since=T0 - timedelta(hours=1))  # fmt: skip

    def market(exposure: tuple[PoolExposure, ...]) -> set[Market]:
        snap = snapshot(jobs=[pending], offerings=[spot, od], exposure=exposure)
        return {c.offering.market for c in SpotfleetPolicy(KNOBS).decide(snap) if isinstance(c, Launch)}

    assert market(()) == {Market.SPOT}
    # 2,000 reclaims in 100 h seen in the pool: ~20/h, an expected life of 3 min < a 10 min restart
    assert market((PoolExposure(pool=spot.key, hours=100.0, interruptions=2000),)) == {Market.ON_DEMAND}
