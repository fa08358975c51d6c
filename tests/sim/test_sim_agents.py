"""``JobTrack``'s reports: checkpoints are reported once written, as a real job reports them.

The controller rolls a requeued job's progress back to its last reported
checkpoint, so a checkpoint reported before it is durable (a save still being
written) or after it was written (only when the next attempt starts) would make
the simulated controller read the wrong slack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spotfleet.sim.agents import CHECKPOINTED_EXIT, KILLED_EXIT, JobTrack

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def track() -> JobTrack:
    # 1 h of work, 100 s restart, a periodic checkpoint every 600 s of work, a 60 s save on request
    t = JobTrack("j", work=3600, nodes=1, restart=100, interval=600, checkpoint_seconds=60)
    t.assign(1, 0, T0)
    return t


def test_a_periodic_checkpoint_is_reported_from_when_it_is_written() -> None:
    t = track()
    assert t.status(0, at(699)).checkpoint is None  # 599 s of work: none written yet
    written = t.status(0, at(1400)).checkpoint  # 1300 s of work: the second save, at 100 + 1200 s
    assert written is not None and (written.step, written.at) == (1200, at(1300))
    assert t.status(0, at(1400)).progress["step"] == 1300


def test_a_requested_save_is_reported_only_once_complete() -> None:
    t = track()
    t.drain(deadline=at(1000), at=at(800))  # 700 s of work; the save takes 60 s
    during = t.status(0, at(830)).checkpoint
    assert during is not None and during.step == 600, "still the periodic one while the save is written"
    done = t.status(0, at(860))
    assert done.exit_code == CHECKPOINTED_EXIT and done.checkpoint is not None
    assert (done.checkpoint.step, done.checkpoint.at) == (700, at(800))


def test_a_save_cut_short_keeps_the_periodic_checkpoint_and_its_time() -> None:
    t = track()
    t.drain(deadline=at(1000), at=at(800))
    t.end_attempt(at(830))  # reclaimed while saving
    assert t.exit_code == KILLED_EXIT
    assert (t.saved, t.saved_at) == (600, at(700)), "written at 100 + 600 s, not when the attempt ended"
    t.assign(2, 0, at(900))
    resumed = t.status(0, at(950)).checkpoint
    assert resumed is not None and (resumed.step, resumed.at) == (600, at(700))
