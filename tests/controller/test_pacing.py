"""Wakes are coalesced and woken steps are paced (``controller/pacing.py``)."""

from __future__ import annotations

from spotfleet.controller.pacing import StepPacer


def test_a_burst_of_wakes_costs_one_step_then_one_rerun() -> None:
    p = StepPacer(min_gap=0.05)
    assert p.wake(10.0) == 10.0, "an idle controller steps at once"
    assert [p.wake(10.0 + i / 1000) for i in range(1, 500)] == [None] * 499, "a pending step absorbs the burst"
    p.started(10.1)
    assert p.wake(10.2) is None, "news during a step: re-run after it, not now"
    assert p.wake(10.3) is None
    assert p.finished(11.1) == 12.1, "the re-run waits as long as the step took"
    assert p.wake(11.5) is None, "already pending"


def test_a_wake_after_a_step_waits_out_the_steps_duration_only() -> None:
    p = StepPacer(min_gap=0.05)
    p.started(0.0)
    assert p.finished(2.0) is None, "nothing arrived during the step: no re-run"
    assert p.wake(3.0) == 4.0, "2 s step ended at 2.0: woken steps no sooner than 4.0"
    p.started(4.0)
    assert p.finished(4.01) is None
    assert p.wake(5.0) == 5.0, "long after a short step: at once"
    p.started(5.0)
    p.finished(5.0)
    assert p.wake(5.0) == 5.05, "never back to back: at least min_gap"


def test_a_step_started_by_the_interval_clears_a_pending_wake() -> None:
    p = StepPacer()
    assert p.wake(1.0) == 1.0
    p.started(1.0)  # the step reads the store after this: it sees that news
    assert p.finished(1.5) is None
    assert not p.pending
