"""The example jobs under a real notice: checkpoint, exit 85, resume, exact totals.

Real subprocesses, the real helper, NoticeDelivery with a fake clock (the agent
side); the last test adds the IMDS emulator and the watcher in front.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from spotfleet.agent.notices import AwsImdsWatcher
from spotfleet.agent.signals import ActionKind, JobTarget, NoticeDelivery
from spotfleet.checkpoint import CHECKPOINTED_EXIT_CODE, job_environment
from spotfleet.clock import FakeClock, SystemClock
from spotfleet.metadata import AwsImdsServer
from spotfleet.model.events import InstanceEvent, NoticeKind

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 400
STEP_SECONDS = "0.005"  # 2 s per full run: ample slack to deliver the notice mid-run on a loaded machine


def until(predicate: Callable[[], bool], *, timeout: float = 20.0) -> None:
    give_up = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < give_up, "condition never became true"
        time.sleep(0.01)


class Run:
    """One job across attempts, started the way the agent starts it."""

    def __init__(self, root: Path, script: str, *args: str) -> None:
        self.root = root
        self.argv = [sys.executable, str(EXAMPLES / script), *args]
        self.attempt = -1
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.root / "ckpt" / "steps.log"

    def steps(self) -> list[tuple[int, int]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        return [(int(a), int(s)) for a, s in (line.split() for line in lines if line.count(" ") == 1)]

    def start(self) -> JobTarget:
        self.attempt += 1
        env = {
            **os.environ,
            **job_environment(
                job_id="counter",
                checkpoint_dir=self.root / "ckpt",
                attempt=self.attempt,
                resume=self.attempt > 0,
                notice_file=self.root / "notice.json",  # left over between attempts, as a stale file would be
                progress_file=self.root / "progress.json",
            ),
        }
        self.proc = subprocess.Popen(self.argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL)
        return JobTarget.for_process("counter", self.proc, notice_file=self.root / "notice.json")

    def wait(self) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=60)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for run in made:
        run.kill()


def notice(clock: FakeClock | SystemClock, seconds: float = 120) -> InstanceEvent:
    now = clock.now()
    return InstanceEvent(
        "local", "i-1", NoticeKind.SPOT_INTERRUPTION, now, now + timedelta(seconds=seconds), source="imds"
    )


def test_counter_checkpoints_on_notice_and_resumes_exactly(tmp_path: Path, clock: FakeClock, runs: list[Run]) -> None:
    run = Run(
        tmp_path, "train_counter.py", "--steps", str(STEPS), "--step-seconds", STEP_SECONDS, "--checkpoint-every", "100"
    )
    runs.append(run)
    delivery = NoticeDelivery(clock=clock)
    delivery.track(run.start())
    until(lambda: len(run.steps()) >= 50)
    delivery.deliver(notice(clock))
    assert run.wait() == CHECKPOINTED_EXIT_CODE
    assert [a.kind for a in delivery.tick()] == [ActionKind.EXITED]
    stopped_at = run.steps()[-1][1]
    assert stopped_at < STEPS

    run.start()
    assert run.wait() == 0
    assert json.loads((tmp_path / "ckpt" / "result.json").read_text()) == {"steps": STEPS, "attempt": 1}
    executed = [s for _, s in run.steps()]
    assert executed == list(range(1, STEPS + 1))  # no step lost, none repeated
    assert {a for a, s in run.steps() if s > stopped_at} == {1}


def test_job_ignoring_the_signal_loses_at_most_one_interval(tmp_path: Path, clock: FakeClock, runs: list[Run]) -> None:
    every = 20
    run = Run(
        tmp_path,
        "ignore_signal.py",
        "--steps",
        str(STEPS),
        "--step-seconds",
        STEP_SECONDS,
        "--checkpoint-every",
        str(every),
    )
    runs.append(run)
    delivery = NoticeDelivery(clock=clock)
    delivery.track(run.start())
    until(lambda: len(run.steps()) >= 50)
    delivery.deliver(notice(clock))
    clock.advance(110)  # deadline − grace: SIGTERM
    assert [a.kind for a in delivery.tick()] == [ActionKind.SIGTERM]
    assert run.wait() == -signal.SIGTERM
    reached = run.steps()[-1][1]
    resume_from = max(int(p.name.split("-")[1].split(".")[0]) for p in (tmp_path / "ckpt").glob("ckpt-*"))

    run.start()
    assert run.wait() == 0
    assert json.loads((tmp_path / "ckpt" / "result.json").read_text())["steps"] == STEPS
    executed = [s for _, s in run.steps()]
    repeated = len(executed) - STEPS
    assert sorted(set(executed)) == list(range(1, STEPS + 1))
    assert repeated == reached - resume_from  # it resumed from its last periodic checkpoint
    assert 0 <= repeated <= every


def test_notice_from_the_metadata_endpoint_to_a_resumed_job(tmp_path: Path, runs: list[Run]) -> None:
    clock = SystemClock()
    run = Run(tmp_path, "train_counter.py", "--steps", str(STEPS), "--step-seconds", STEP_SECONDS)
    runs.append(run)
    with (
        AwsImdsServer(instance_id="i-42", zone="us-east-1a") as imds,
        AwsImdsWatcher(imds.url, provider="local", clock=clock, interval=0.05, timeout=1) as watcher,
    ):
        delivery = NoticeDelivery(clock=clock)
        delivery.track(run.start())
        until(lambda: len(run.steps()) >= 50)
        imds.announce("spot", 120)
        events: list[InstanceEvent] = []

        def noticed() -> bool:
            events.extend(watcher.poll())
            return bool(events)

        until(noticed)
        assert [(e.kind, e.provider, e.provider_instance_id) for e in events] == [
            (NoticeKind.SPOT_INTERRUPTION, "local", "i-42")
        ]
        delivery.deliver(events[0])
        assert run.wait() == CHECKPOINTED_EXIT_CODE
    run.start()
    assert run.wait() == 0
    assert [s for _, s in run.steps()] == list(range(1, STEPS + 1))
