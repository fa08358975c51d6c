"""Issue 14, point 6: one assignment the agent cannot start (a NUL byte in its
command) is reported as that job's failure; the agent keeps serving the others."""

from __future__ import annotations

import sys
from pathlib import Path

from spotfleet.agent.runner import UNSTARTABLE_EXIT, JobRunner
from spotfleet.clock import FakeClock
from spotfleet.wire import Assignment


def _assignment(job_id: str, command: list[str] | str, tmp_path: Path) -> Assignment:
    return Assignment(job_id=job_id, attempt=1, node_rank=0, name=job_id, command=command,
                      checkpoint_dir=str(tmp_path / "ckpt" / job_id))  # fmt: skip


def test_an_unstartable_assignment_fails_alone(tmp_path: Path) -> None:
    runner = JobRunner(work_dir=tmp_path, clock=FakeClock())
    bad = _assignment("job-bad", ["python3", "-c", "print('a\x00b')"], tmp_path)
    shell_bad = _assignment("job-bad2", "echo a\x00b", tmp_path)
    good = _assignment("job-good", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path)
    try:
        runner.reconcile([bad, shell_bad, good])  # raised ValueError("embedded null byte") before
        runner.reconcile([bad, shell_bad, good])  # and again on every heartbeat: never retried here
        by_job = {s.job_id: s for s in runner.statuses()}
        assert by_job["job-good"].status == "running"
        for job_id in ("job-bad", "job-bad2"):
            s = by_job[job_id]
            assert (s.status, s.exit_code) == ("exited", UNSTARTABLE_EXIT)
            assert s.message is not None and "null byte" in s.message
        assert set(runner.running_keys()) == {("job-good", 1, 0)}
        runner.reconcile([good])  # the controller has seen the failure: forgotten
        assert {s.job_id for s in runner.statuses()} == {"job-good"}
    finally:
        runner.stop_all()


def test_a_failed_run_reports_the_gpu_error_line_of_its_output(tmp_path: Path) -> None:
    """Issue 14, point 3: the controller avoids a node after a CUDA/NVML error;
    the agent finds the line in the job's output and reports it."""
    import time

    runner = JobRunner(work_dir=tmp_path, clock=FakeClock())
    code = "print('epoch 1'); print('RuntimeError: CUDA error: an illegal memory access was encountered'); exit(1)"
    plain = "print('ValueError: bad config'); exit(1)"
    runner.reconcile([_assignment("job-gpu", [sys.executable, "-c", code], tmp_path),
                      _assignment("job-app", [sys.executable, "-c", plain], tmp_path)])  # fmt: skip
    try:
        for _ in range(100):
            by_job = {s.job_id: s for s in runner.statuses()}
            if all(s.status == "exited" for s in by_job.values()):
                break
            time.sleep(0.05)  # waiting for real child processes to exit, not for a policy
        assert by_job["job-gpu"].exit_code == 1 and by_job["job-gpu"].node_error is not None
        assert "CUDA error" in by_job["job-gpu"].node_error
        assert by_job["job-app"].exit_code == 1 and by_job["job-app"].node_error is None
    finally:
        runner.stop_all()
