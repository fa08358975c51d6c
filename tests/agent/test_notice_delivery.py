"""NoticeDelivery with a fake clock and real child processes (own process groups)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from spotfleet.agent.signals import ActionKind, JobTarget, NoticeDelivery, Phase, escalation_times
from spotfleet.checkpoint import CHECKPOINTED_EXIT_CODE, job_environment
from spotfleet.clock import FakeClock
from spotfleet.model.events import InstanceEvent, NoticeKind

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

COOPERATIVE = """
import time
from spotfleet import checkpoint
ck = checkpoint.default()
ck.install()
print("ready", flush=True)
while True:
    time.sleep(0.005)
    if ck.should_checkpoint():
        notice = ck.notice()
        ck.save_json({"kind": notice.kind}, step=ck.signals_received)
        print("saved", notice.kind, notice.exit, flush=True)
        if ck.should_exit():
            ck.exit_checkpointed()
"""

IGNORES_NOTICE = """
import signal, sys, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
if "--ignore-sigterm" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""

PARENT_OF_WORKER = """
import signal, subprocess, sys
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
worker.wait()
"""


class Jobs:
    """Starts job processes the way the agent does and cleans them up."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self, script: str, *args: str, job_id: str = "job-1", grace: float = 10, interval: float | None = None
    ) -> tuple[subprocess.Popen[str], JobTarget]:
        root = self.tmp_path / job_id
        root.mkdir(exist_ok=True)
        env = {
            **os.environ,
            **job_environment(
                job_id=job_id,
                checkpoint_dir=root / "ckpt",
                attempt=0,
                resume=False,
                notice_file=root / "notice.json",
                progress_file=root / "progress.json",
            ),
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        target = JobTarget.for_process(
            job_id,
            proc,
            notice_file=root / "notice.json",
            grace=timedelta(seconds=grace),
            interval=None if interval is None else timedelta(seconds=interval),
        )
        return proc, target

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stdout:
                proc.stdout.close()


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Jobs]:
    j = Jobs(tmp_path)
    yield j
    j.close()


@pytest.fixture
def delivery(clock: FakeClock) -> NoticeDelivery:
    return NoticeDelivery(clock=clock)


def spot(deadline_s: float = 120, kind: NoticeKind = NoticeKind.SPOT_INTERRUPTION) -> InstanceEvent:
    return InstanceEvent("aws", "i-1", kind, START, START + timedelta(seconds=deadline_s), source="imds")


def test_escalation_times() -> None:
    d = START + timedelta(seconds=120)
    assert escalation_times(now=START, deadline=d, grace=timedelta(seconds=10)) == (
        d - timedelta(seconds=10),
        d - timedelta(seconds=5),
    )
    d = START + timedelta(seconds=8)  # a notice shorter than two graces: the job keeps half of it
    assert escalation_times(now=START, deadline=d, grace=timedelta(seconds=10)) == (
        d - timedelta(seconds=4),
        d - timedelta(seconds=2),
    )


def test_cooperative_job_checkpoints_and_exits_85(jobs: Jobs, delivery: NoticeDelivery, clock: FakeClock) -> None:
    proc, target = jobs.start(COOPERATIVE)
    delivery.track(target)
    [action] = delivery.deliver(spot(120))
    assert action.kind is ActionKind.NOTICE
    notice = json.loads(target.notice_file.read_text())
    assert notice == {
        "kind": "spot_interruption",
        "deadline": "2026-03-01T12:02:00Z",
        "seconds_left": 120.0,
        "exit": True,
        "issued_at": "2026-03-01T12:00:00Z",
        "source": "imds",
        "detail": "",
    }
    assert proc.wait(timeout=10) == CHECKPOINTED_EXIT_CODE
    assert proc.stdout is not None and proc.stdout.readline().split() == ["saved", "spot_interruption", "True"]
    clock.advance(1)
    assert [a.kind for a in delivery.tick()] == [ActionKind.EXITED]
    clock.advance(200)
    assert delivery.tick() == []  # nothing to escalate: it left in time
    assert delivery.delivery("job-1").phase is Phase.EXITED  # type: ignore[union-attr]


def test_job_ignoring_the_signal_gets_sigterm_at_deadline_minus_grace(
    jobs: Jobs, delivery: NoticeDelivery, clock: FakeClock
) -> None:
    proc, target = jobs.start(IGNORES_NOTICE, grace=10)
    delivery.deliver(spot(120), [target])
    clock.advance(109.9)
    assert delivery.tick() == []
    assert proc.poll() is None  # SIGUSR1 ignored
    clock.advance(0.1)
    assert [a.kind for a in delivery.tick()] == [ActionKind.SIGTERM]
    assert proc.wait(timeout=10) == -signal.SIGTERM
    assert [a.kind for a in delivery.tick()] == [ActionKind.EXITED]


def test_job_ignoring_sigterm_too_gets_sigkill(jobs: Jobs, delivery: NoticeDelivery, clock: FakeClock) -> None:
    proc, target = jobs.start(IGNORES_NOTICE, "--ignore-sigterm", grace=10)
    delivery.deliver(spot(120), [target])
    clock.advance(110)
    assert [a.kind for a in delivery.tick()] == [ActionKind.SIGTERM]
    clock.advance(4.9)
    assert delivery.tick() == []
    assert proc.poll() is None
    clock.advance(0.1)
    assert [a.kind for a in delivery.tick()] == [ActionKind.SIGKILL]
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_signal_goes_to_the_whole_process_group(jobs: Jobs, delivery: NoticeDelivery) -> None:
    proc, target = jobs.start(PARENT_OF_WORKER, COOPERATIVE)  # the worker prints "ready"
    delivery.deliver(spot(120), [target])
    assert proc.wait(timeout=10) == 0  # the launcher ignored it; its worker saved and exited 85
    assert proc.stdout is not None and proc.stdout.readline().split()[0] == "saved"


def test_rebalance_is_soft(jobs: Jobs, delivery: NoticeDelivery, clock: FakeClock) -> None:
    proc, target = jobs.start(COOPERATIVE)
    rebalance = InstanceEvent("aws", "i-1", NoticeKind.REBALANCE, START, None, source="imds")
    [action] = delivery.deliver(rebalance, [target])
    assert action.kind is ActionKind.NOTICE
    assert proc.stdout is not None and proc.stdout.readline().split() == ["saved", "rebalance", "False"]
    assert json.loads(target.notice_file.read_text())["deadline"] is None
    clock.advance(3600)
    assert delivery.tick() == []
    assert proc.poll() is None  # saved and carried on


def test_duplicates_are_ignored_and_earlier_deadlines_redelivered(jobs: Jobs, clock: FakeClock) -> None:
    sent: list[tuple[int, int]] = []

    def kill(pgid: int, signum: int) -> None:
        sent.append((pgid, signum))

    _, target = jobs.start(IGNORES_NOTICE)
    delivery = NoticeDelivery(clock=clock, kill=kill)
    delivery.track(target)
    assert len(delivery.deliver(spot(120))) == 1
    assert delivery.deliver(spot(120)) == []  # the same notice again (agent and controller both saw it)
    rebalance = InstanceEvent("aws", "i-1", NoticeKind.REBALANCE, START, None)
    assert delivery.deliver(rebalance) == []  # softer than what it already has
    assert len(delivery.deliver(spot(60))) == 1  # more urgent: rescheduled
    assert sent == [(target.pgid, signal.SIGUSR1)] * 2
    assert json.loads(target.notice_file.read_text())["seconds_left"] == 60
    clock.advance(50)
    assert [a.kind for a in delivery.tick()] == [ActionKind.SIGTERM]


def test_notice_for_a_job_already_gone(jobs: Jobs, delivery: NoticeDelivery) -> None:
    proc, target = jobs.start(IGNORES_NOTICE)
    os.killpg(target.pgid, signal.SIGKILL)
    proc.wait(timeout=10)
    [action] = delivery.deliver(spot(120), [target])
    assert action.kind is ActionKind.EXITED


def test_periodic_checkpoints_until_a_notice(jobs: Jobs, delivery: NoticeDelivery, clock: FakeClock) -> None:
    proc, target = jobs.start(COOPERATIVE, interval=60)
    delivery.track(target)
    clock.advance(59)
    assert delivery.tick() == []
    clock.advance(1)
    assert [a.kind for a in delivery.tick()] == [ActionKind.PERIODIC]
    assert proc.stdout is not None and proc.stdout.readline().split() == ["saved", "checkpoint", "False"]
    clock.advance(60)
    assert [a.kind for a in delivery.tick()] == [ActionKind.PERIODIC]
    assert proc.stdout.readline().split() == ["saved", "checkpoint", "False"]
    delivery.deliver(spot(120))
    assert proc.wait(timeout=10) == CHECKPOINTED_EXIT_CODE
    clock.advance(60)
    assert [a.kind for a in delivery.tick()] == [ActionKind.EXITED]  # and no more periodic requests
