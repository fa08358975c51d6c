"""The simulator end to end: the real controller, SimProvider and simulated agents.

Traces are hand-made with 10-minute ticks and a 0.2 h (720 s) restart delay, so
every expected figure below can be checked with a pencil.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from spotfleet.model.offering import Market
from spotfleet.sim.engine import SimResult, SimSettings
from spotfleet.sim.optimal import optimal_single_job
from spotfleet.sim.scenario import run_single_job
from spotfleet.sim.traces import TraceSet
from spotfleet.sim.workload import load_workload

from .helpers import MakeSet, trace_file

TICK = 600
R = 720  # restart seconds


def run(traces: TraceSet, policy: str, *, work: float, deadline: float, **kwargs: object) -> SimResult:
    result = run_single_job(traces, policy, work_hours=work, deadline_hours=deadline, start_tick=0, **kwargs)  # type: ignore[arg-type]
    assert result.sim is not None
    return result.sim


def spans(result: SimResult) -> list[tuple[str, float, float | None]]:
    """(market, start s, end s) of every instance, relative to the start."""
    return [
        (
            b.market.value,
            (b.launched_at - result.start).total_seconds(),
            (b.ended_at - result.start).total_seconds() if b.ended_at else None,
        )
        for b in result.bills
    ]


def test_on_demand_costs_work_plus_one_restart(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1] * 30), tick=TICK, spot=1.0, on_demand=3.0)
    result = run(traces, "on-demand", work=1, deadline=3)
    assert spans(result) == [("on_demand", 0.0, R + 3600.0)]
    assert result.cost == pytest.approx(1.2 * 3.0)
    assert result.jobs[0].finished_at == result.start + timedelta(seconds=R + 3600)
    assert result.deadline_misses == 0 and result.jobs[0].state == "succeeded"


def test_greedy_idles_while_spot_is_gone_and_keeps_its_checkpoint(make_set: MakeSet) -> None:
    # Spot at ticks 0-1, gone at 2-3, back from 4. The reclaim at 1200 s is noticed
    # at 1080 s (AWS, 120 s); the job checkpoints 360 s of work (1080 − 720) and
    # leaves at 1110 s. Nothing runs until spot returns at 2400 s; then a restart
    # and the remaining 3240 s: done at 2400 + 720 + 3240 = 6360 s.
    traces = make_set(("us-east-1a", [1, 1, 0, 0] + [1] * 26), tick=TICK, spot=1.0, on_demand=3.0)
    result = run(traces, "greedy", work=1, deadline=5)
    assert spans(result) == [("spot", 0.0, 1110.0), ("spot", 2400.0, 6360.0)]
    assert result.cost == pytest.approx((1110 + 3960) / 3600)
    job = result.jobs[0]
    assert job.finished_at == result.start + timedelta(seconds=6360)
    assert job.lost_seconds == 0 and job.interruptions == 1 and job.starts == 2
    assert result.reclaims == 0  # it left before the reclaim


def test_greedy_goes_on_demand_when_the_slack_is_gone(make_set: MakeSet) -> None:
    # No spot ever. Greedy waits while waiting one more tick (1/6 h) still leaves
    # the work (1 h) and a restart (0.2 h): at 1800 s 1.5 h are left (wait), at
    # 2400 s 1.333 h (go). On-demand from 2400 s, done at 2400 + 720 + 3600 s.
    traces = make_set(("us-east-1a", [0] * 30), tick=TICK, spot=1.0, on_demand=3.0)
    result = run(traces, "greedy", work=1, deadline=2)
    assert spans(result) == [("on_demand", 2400.0, 6720.0)]
    assert result.cost == pytest.approx(3.6)
    assert result.deadline_misses == 0


def uniform_progress_trace(make_set: MakeSet) -> TraceSet:
    return make_set(("us-east-1a", [1] * 6 + [0] * 60), tick=TICK, spot=1.0, on_demand=3.0)


def test_uniform_progress_switches_to_on_demand_at_the_computed_tick(make_set: MakeSet) -> None:
    # 2 h of work in an 8 h window: the uniform-progress line is t/4. Spot for the
    # first hour: reclaim noticed at 3480 s, 2760 s of work saved (0.767 h). The
    # line passes 0.767 h at t = 3.067 h; the first tick after that is 11400 s
    # (3.167 h): uniform progress buys on-demand exactly then.
    traces = uniform_progress_trace(make_set)
    result = run(traces, "uniform-progress", work=2, deadline=8)
    assert spans(result) == [("spot", 0.0, 3510.0), ("on_demand", 11400.0, 11400.0 + R + 4440)]
    assert result.cost == pytest.approx(3510 / 3600 + (R + 4440) / 3600 * 3.0)


def test_greedy_waits_much_longer_on_the_same_trace(make_set: MakeSet) -> None:
    # Greedy only moves when the slack is gone: 1.233 h of work + 0.2 h restart
    # + one 1/6 h tick ≥ time left first holds at 23400 s (6.5 h).
    traces = uniform_progress_trace(make_set)
    result = run(traces, "greedy", work=2, deadline=8)
    assert spans(result) == [("spot", 0.0, 3510.0), ("on_demand", 23400.0, 23400.0 + R + 4440)]
    assert result.deadline_misses == 0


def test_short_notice_rolls_back_to_the_periodic_checkpoint(make_set: MakeSet) -> None:
    # GCP gives 30 s of notice; this job needs 60 s to checkpoint, so the reclaim
    # at 1800 s kills it: 1080 s of work (1800 − 720) minus what the 10-minute
    # periodic checkpoint saved (600 s) is lost.
    traces = make_set(
        trace_file("us-central1-a", [1, 1, 1] + [0] * 3 + [1] * 30, tick=TICK, cloud="gcp",
                   instance_type="a3-highgpu-8g", spot=10.0, on_demand=80.0),
    )  # fmt: skip
    settings = SimSettings(checkpoint_seconds=60)
    result = run(
        traces,
        "greedy",
        work=1,
        deadline=6,
        checkpoint_interval=timedelta(minutes=10),
        settings=settings,
    )
    job = result.jobs[0]
    assert job.lost_seconds == pytest.approx(1080 - 600)
    assert result.reclaims == 1
    assert spans(result)[0] == ("spot", 0.0, 1800.0)
    # Resumes at 3600 s from 600 s of saved work: 720 s restart + 3000 s.
    assert job.finished_at == result.start + timedelta(seconds=3600 + R + 3000)


def test_after_a_reclaim_that_lost_work_the_controller_reads_the_checkpoints_progress(
    make_set: MakeSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run above, watched from the policy's side: the 10-minute periodic
    # checkpoints are reported as they are written (at 720 + 600 s of the attempt:
    # 600 s of work), and once the reclaim at 1800 s killed the save, the job waits
    # for spot with the checkpoint's 600 s of progress, not the 1080 s it last
    # reported (issue 12: stale progress overstated the slack by up to an interval).
    import spotfleet.sim.scenario as scenario
    from spotfleet.model.job import JobState

    seen: list[tuple[JobState, int | None, float | None, int | None]] = []
    make = scenario.make_policy

    class Watching:
        def __init__(self, inner: object) -> None:
            self.inner, self.name = inner, inner.name  # type: ignore[attr-defined]

        def decide(self, snapshot: object) -> list[object]:
            for j in snapshot.jobs.values():  # type: ignore[attr-defined]
                ckpt = j.checkpoint.step if j.checkpoint else None
                seen.append((j.state, j.progress.get("step"), j.progress.get("done_s"), ckpt))
            return self.inner.decide(snapshot)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(scenario, "make_policy", lambda *a, **k: Watching(make(*a, **k)))
    traces = make_set(
        trace_file("us-central1-a", [1, 1, 1] + [0] * 3 + [1] * 30, tick=TICK, cloud="gcp",
                   instance_type="a3-highgpu-8g", spot=10.0, on_demand=80.0),
    )  # fmt: skip
    result = run(traces, "greedy", work=1, deadline=6, checkpoint_interval=timedelta(minutes=10),
                 settings=SimSettings(checkpoint_seconds=60))  # fmt: skip
    assert result.jobs[0].lost_seconds == pytest.approx(1080 - 600)
    running = [s for s in seen if s[0] in (JobState.RUNNING, JobState.DRAINING)]
    assert 600 in {s[3] for s in running}, "the periodic save was reported while the attempt ran"
    assert max(s[1] or 0 for s in running) >= 1000, "the attempt reported work past its checkpoint"
    waiting = [s for s in seen if s[0] is JobState.PENDING and s[3] == 600]
    assert waiting and all(s[1] == 600 and s[2] == pytest.approx(600, abs=1) for s in waiting)


def test_enough_notice_keeps_every_second_of_work(make_set: MakeSet) -> None:
    traces = make_set(
        trace_file("us-central1-a", [1, 1, 1] + [0] * 3 + [1] * 30, tick=TICK, cloud="gcp",
                   instance_type="a3-highgpu-8g", spot=10.0, on_demand=80.0),
    )  # fmt: skip
    result = run(traces, "greedy", work=1, deadline=6, settings=SimSettings(checkpoint_seconds=20))
    job = result.jobs[0]
    assert job.lost_seconds == 0
    assert spans(result)[0] == ("spot", 0.0, 1790.0)  # left 10 s before the reclaim


@pytest.mark.parametrize("policy", ["on-demand", "greedy", "uniform-progress"])
def test_no_policy_beats_the_omniscient_optimum(make_set: MakeSet, policy: str) -> None:
    traces = make_set(
        trace_file("us-east-1a", ([1] * 5 + [0] * 4) * 6, spot=[1.0 + (i % 7) / 10 for i in range(54)], tick=TICK),
        trace_file("us-east-1b", ([0] * 3 + [1] * 6) * 6, spot=1.3, tick=TICK),
    )  # fmt: skip
    best = optimal_single_job(traces, work_hours=3, deadline_hours=6, restart_hours=0.2)
    result = run(traces, policy, work=3, deadline=6)
    assert result.deadline_misses == 0
    assert result.cost >= best.cost - 1e-9


def test_the_simulator_is_deterministic(make_set: MakeSet) -> None:
    traces = make_set(
        trace_file("us-east-1a", ([1] * 5 + [0] * 4) * 6, tick=TICK),
        trace_file("us-east-1b", ([0] * 3 + [1] * 6) * 6, spot=1.3, tick=TICK),
    )
    first = run(traces, "uniform-progress", work=3, deadline=6).to_dict()
    second = run(traces, "uniform-progress", work=3, deadline=6).to_dict()
    for d in (first, second):
        for job in d["jobs"]:
            job.pop("name")
    assert first == second


def test_fleet_workload_runs_every_job(make_set: MakeSet, tmp_path: Path) -> None:
    traces = make_set(
        trace_file("us-east-1a", [1, 1, 0, 0, 1, 1] * 10, tick=TICK, requested=2),
        trace_file("us-east-1b", [2] * 60, tick=TICK, spot=1.5, requested=2),
    )
    path = tmp_path / "w.yaml"
    path.write_text(
        "jobs:\n"
        "  - {name: urgent, arrival: 0h, work: 1h, priority: critical}\n"
        "  - {name: batch, arrival: 30m, work: 2h, deadline: 5h, count: 2}\n"
        "  - {name: scavenger, arrival: 1h, work: 1h, priority: opportunistic}\n"
    )
    from spotfleet.sim.engine import Simulation
    from spotfleet.sim.scenario import make_policy

    workload = load_workload(path, traces)
    assert [i.spec.name for i in workload.items] == ["urgent", "batch-1", "batch-2", "scavenger"]
    sim = Simulation(traces, workload.items, make_policy("greedy", tick_hours=TICK / 3600), start=workload.start)
    result = sim.run()
    assert {j.name: j.state for j in result.jobs} == dict.fromkeys(
        ["urgent", "batch-1", "batch-2", "scavenger"], "succeeded"
    )
    assert result.deadline_misses == 0
    markets = {b.market for b in result.bills}
    assert markets == {Market.SPOT, Market.ON_DEMAND}  # critical on on-demand, the rest on spot


def test_uniform_progress_prefers_spot_even_when_behind(make_set: MakeSet) -> None:
    # No spot at tick 0: the job waits (it is on the line, 0 h of 0 h). At 600 s
    # it is behind the line, but spot is back: spot progresses as fast as
    # on-demand for less, so uniform progress takes spot, not on-demand.
    traces = make_set(("us-east-1a", [0] + [1] * 40), tick=TICK, spot=1.0, on_demand=3.0)
    result = run(traces, "uniform-progress", work=2, deadline=4)
    assert spans(result) == [("spot", 600.0, 600.0 + R + 7200)]


def test_uniform_progress_stays_in_its_region_greedy_does_not(make_set: MakeSet) -> None:
    traces = make_set(
        trace_file("us-east-1a", [1] * 6 + [0] * 60, spot=1.0, tick=TICK),
        trace_file("us-west-2a", [1] * 66, spot=1.5, tick=TICK),
    )
    up = run(traces, "uniform-progress", work=2, deadline=8)
    assert {b.zone for b in up.bills} == {"us-east-1a"}
    assert [b.market for b in up.bills] == [Market.SPOT, Market.ON_DEMAND]
    greedy = run(traces, "greedy", work=2, deadline=8)
    assert [(b.zone, b.market) for b in greedy.bills] == [("us-east-1a", Market.SPOT), ("us-west-2a", Market.SPOT)]
    assert greedy.cost < up.cost


def _short_notice_trace(make_set: MakeSet) -> TraceSet:
    # GCP (30 s notice), spot for 70 minutes, gone for 30, then back.
    return make_set(
        trace_file("us-central1-a", [1] * 7 + [0] * 3 + [1] * 30, tick=TICK, cloud="gcp",
                   instance_type="a3-highgpu-8g", spot=10.0, on_demand=80.0),
    )  # fmt: skip


def test_a_checkpoint_longer_than_the_notice_keeps_its_interval_in_reserve(
    make_set: MakeSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 h of work, 50 min of slack, a 60 s checkpoint every 30 min on GCP's 30 s notice.
    # Trusting the notice, spot needs only d + m + d = 36 min of slack to start: the job
    # takes spot, the reclaim at 4200 s throws away the 1680 s done since its checkpoint
    # at 1800 s of work, and the restart after it no longer fits: late. Derived from the
    # spec's checkpoint.duration (60 s > 30 s), the reserve holds the 30 min interval,
    # starting on spot needs 66 min, and the job runs on on-demand: on time.
    from spotfleet.policies.knobs import Knobs
    from spotfleet.policies.spotfleet import SpotfleetPolicy

    traces = _short_notice_trace(make_set)
    kwargs: dict[str, object] = {"work": 2, "deadline": 2 + 50 / 60, "checkpoint_interval": timedelta(minutes=30),
                                 "settings": SimSettings(checkpoint_seconds=60)}  # fmt: skip
    derived = run(traces, "spotfleet", **kwargs)  # type: ignore[arg-type]
    assert derived.deadline_misses == 0
    assert [s[0] for s in spans(derived)] == ["on_demand"]

    import spotfleet.sim.scenario as scenario

    # the old constant: every job trusts the notice
    trusting = SpotfleetPolicy(
        Knobs(trust_notice_checkpoint=True, restart_delay_h=0.2, decision_interval_h=TICK / 3600)
    )
    monkeypatch.setattr(scenario, "make_policy", lambda *a, **k: trusting)
    trusted = run(traces, "spotfleet", **kwargs)  # type: ignore[arg-type]
    assert spans(trusted)[0] == ("spot", 0.0, 4200.0)
    assert trusted.jobs[0].lost_seconds == pytest.approx(1680)
    assert trusted.deadline_misses == 1


def test_a_checkpoint_within_the_notice_takes_spot(make_set: MakeSet) -> None:
    # The same job saving in 20 s fits GCP's notice: spot, and the reclaim costs a restart only.
    traces = _short_notice_trace(make_set)
    result = run(traces, "spotfleet", work=2, deadline=2 + 50 / 60, checkpoint_interval=timedelta(minutes=30),
                 settings=SimSettings(checkpoint_seconds=20))  # fmt: skip
    assert spans(result)[0][0] == "spot"
    assert result.jobs[0].lost_seconds == 0
    assert result.deadline_misses == 0
