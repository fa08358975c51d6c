"""``progress_at_checkpoint``: the progress a requeued job resumes with.

A report counts work done since the last checkpoint too; a job requeued without
saving loses that work, so the deadline rules must read the checkpoint's step,
not the last report's (issue 12: slack overstated by up to an interval)."""

from __future__ import annotations

from datetime import UTC, datetime

from spotfleet.model.job import Checkpoint, progress_at_checkpoint

AT = datetime(2026, 1, 1, tzinfo=UTC)


def ckpt(step: int | None) -> Checkpoint:
    return Checkpoint(f"s3://c/{step}", step, AT, 1)


def test_rolls_step_fraction_and_done_s_back_to_the_checkpoint() -> None:
    reported = {"step": 1000, "fraction": 0.5, "done_s": 3600.0, "samples_per_s": 12.5, "extra": {"loss": 0.1}}
    out = progress_at_checkpoint(reported, ckpt(600))
    assert out == {"step": 600, "fraction": 0.3, "done_s": 2160.0, "samples_per_s": 12.5, "extra": {"loss": 0.1}}
    assert reported["step"] == 1000, "the report itself is left as it was"


def test_without_a_checkpoint_the_job_starts_over() -> None:
    assert progress_at_checkpoint({"step": 40, "fraction": 0.2}, None) == {"step": 0, "fraction": 0.0}


def test_a_checkpoint_at_the_reported_step_changes_nothing() -> None:
    reported = {"step": 600, "fraction": 0.3}
    assert progress_at_checkpoint(reported, ckpt(600)) is reported


def test_progress_never_moves_forward_or_is_guessed() -> None:
    for reported, checkpoint in [
        ({"step": 500}, ckpt(600)),  # a checkpoint ahead of the report: keep the report
        ({"fraction": 0.5, "done_s": 10.0}, ckpt(600)),  # no step: no common unit with the checkpoint
        ({"step": 500, "fraction": 0.5}, ckpt(None)),  # a checkpoint without a step
        ({"step": True}, None),  # not a step count
        ({"step": 0}, None),
        ({}, None),
    ]:
        assert progress_at_checkpoint(reported, checkpoint) is reported, (reported, checkpoint)
