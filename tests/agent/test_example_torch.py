"""examples/train_torch.py under a notice (torch comes with the dev extra: ``spotfleet[ddp]``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from spotfleet.agent.signals import JobTarget, NoticeDelivery
from spotfleet.checkpoint import CHECKPOINTED_EXIT_CODE, Checkpointer, job_environment
from spotfleet.clock import FakeClock
from spotfleet.model.events import InstanceEvent, NoticeKind

pytestmark = pytest.mark.timeout(300)
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_torch.py"


def test_torch_example_checkpoints_on_notice_and_resumes(tmp_path: Path, clock: FakeClock) -> None:
    def env(attempt: int) -> dict[str, str]:
        return {
            **os.environ,
            **job_environment(
                job_id="torch",
                checkpoint_dir=tmp_path / "ckpt",
                attempt=attempt,
                resume=attempt > 0,
                notice_file=tmp_path / "notice.json",
                progress_file=tmp_path / "progress.json",
            ),
        }

    argv = [sys.executable, str(SCRIPT), "--steps", "600", "--checkpoint-every", "250", "--batch-size", "32"]
    proc = subprocess.Popen(argv, env=env(0), start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and "starting at step 0" in proc.stdout.readline()
        give_up = time.monotonic() + 150  # torch's import alone takes 10-30 s on a loaded 2-core machine
        while not (tmp_path / "progress.json").exists():  # its first step is done
            assert time.monotonic() < give_up and proc.poll() is None
            time.sleep(0.01)
        delivery = NoticeDelivery(clock=clock)
        now = clock.now()
        notice = InstanceEvent(
            "local", "i-1", NoticeKind.SPOT_INTERRUPTION, now, now + timedelta(seconds=120), source="imds"
        )
        delivery.deliver(notice, [JobTarget.for_process("torch", proc, notice_file=tmp_path / "notice.json")])
        assert proc.wait(timeout=60) == CHECKPOINTED_EXIT_CODE
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    saved = Checkpointer(env=env(1)).latest()
    assert saved is not None and saved.path.suffix == ".pt" and 0 < saved.step < 600

    result = subprocess.run(argv, env=env(1), capture_output=True, text=True, timeout=120, check=True)
    assert f"starting at step {saved.step} of 600" in result.stdout
    assert "done: 600 steps" in result.stdout
