"""spotfleet.checkpoint, the job author's helper: env, atomic saves, resume, progress."""

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

from spotfleet import checkpoint
from spotfleet.agent.progress import read_progress
from spotfleet.agent.signals import notice_payload
from spotfleet.checkpoint import CHECKPOINTED_EXIT_CODE, Checkpointer, job_environment
from spotfleet.model.events import InstanceEvent, NoticeKind


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return job_environment(
        job_id="job-7",
        checkpoint_dir=tmp_path / "ckpt",
        attempt=2,
        resume=True,
        notice_file=tmp_path / "notice.json",
        progress_file=tmp_path / "progress.json",
        signal_name="SIGUSR2",
    )


@pytest.fixture
def restore_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_reads_the_protocol_environment(env: dict[str, str], tmp_path: Path) -> None:
    ck = Checkpointer(env=env)
    assert (ck.job_id, ck.attempt, ck.resume) == ("job-7", 2, True)
    assert ck.checkpoint_dir == tmp_path / "ckpt"
    assert ck.notice_file == tmp_path / "notice.json"
    assert ck.progress_file == tmp_path / "progress.json"
    assert ck.signum is signal.SIGUSR2


def test_works_outside_spotfleet() -> None:
    ck = Checkpointer(env={})
    assert (ck.job_id, ck.attempt, ck.resume, ck.notice_file) == ("", 0, False, None)
    assert ck.checkpoint_dir == Path("checkpoints")
    assert ck.signum is signal.SIGUSR1
    assert ck.notice() is None and not ck.should_exit()


def test_save_and_resume_latest(env: dict[str, str]) -> None:
    ck = Checkpointer(env=env, keep=2)
    assert ck.latest() is None
    for step in (100, 200, 300):
        ck.save_json({"step": step}, step=step)
    latest = Checkpointer(env=env).latest()  # a new attempt finds it
    assert latest is not None and latest.step == 300 and latest.read_json() == {"step": 300}
    assert [c.step for c in ck.checkpoints()] == [200, 300]  # older ones pruned


def test_a_torn_write_is_never_resumed_from(env: dict[str, str]) -> None:
    ck = Checkpointer(env=env)
    ck.save_bytes(b"good", step=10)
    (ck.checkpoint_dir / ".ckpt-000000000020.bin.1234.tmp").write_bytes(b"half")  # a crash mid-write
    with pytest.raises(RuntimeError), ck.writing(step=30) as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("killed while saving")
    latest = ck.latest()
    assert latest is not None and latest.step == 10 and latest.read_bytes() == b"good"
    assert not any(p.name.startswith(".ckpt-000000000030") for p in ck.checkpoint_dir.iterdir())


def test_writing_for_frameworks_that_save_to_a_path(env: dict[str, str]) -> None:
    ck = Checkpointer(env=env)
    with ck.writing(step=5, suffix=".pt") as tmp:
        tmp.write_bytes(b"tensor bytes")
    latest = ck.latest()
    assert latest is not None and latest.path.name == "ckpt-000000000005.pt" and latest.read_bytes() == b"tensor bytes"


def test_negative_step_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Checkpointer(env=env).save_bytes(b"", step=-1)


def test_signal_sets_should_checkpoint_and_save_clears_it(env: dict[str, str], restore_handlers: None) -> None:
    ck = Checkpointer(env=env)
    seen: list[int] = []
    ck.install(on_signal=seen.append)
    assert not ck.should_checkpoint()
    os.kill(os.getpid(), signal.SIGUSR2)
    assert ck.should_checkpoint() and seen == [signal.SIGUSR2]
    assert not ck.should_exit()  # no notice file: a plain checkpoint request
    ck.save_json({}, step=1)
    assert not ck.should_checkpoint()
    os.kill(os.getpid(), signal.SIGTERM)  # the last call before SIGKILL
    assert ck.should_checkpoint() and ck.should_exit()


def test_notice_file_decides_whether_to_exit(env: dict[str, str], tmp_path: Path, restore_handlers: None) -> None:
    ck = Checkpointer(env=env)
    ck.install()
    os.kill(os.getpid(), signal.SIGUSR2)  # the agent writes the notice, then signals
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    rebalance = InstanceEvent("aws", "i", NoticeKind.REBALANCE, now, None)
    (tmp_path / "notice.json").write_text(json.dumps(notice_payload(rebalance, now=now)))
    notice = ck.notice()
    assert notice is not None and notice.kind == "rebalance" and not notice.exit and notice.seconds_remaining() is None
    assert not ck.should_exit()
    spot = InstanceEvent("aws", "i", NoticeKind.SPOT_INTERRUPTION, now, now + timedelta(seconds=120))
    (tmp_path / "notice.json").write_text(json.dumps(notice_payload(spot, now=now)))
    notice = ck.notice()
    assert notice is not None and notice.exit and notice.deadline == now + timedelta(seconds=120)
    assert notice.seconds_left == 120 and notice.seconds_remaining(now + timedelta(seconds=20)) == 100
    assert ck.should_exit()
    (tmp_path / "notice.json").write_text("{not json")
    assert ck.notice() is None


def test_a_stale_notice_without_a_signal_is_ignored(env: dict[str, str], tmp_path: Path) -> None:
    """A notice left from an earlier attempt must not stop the resumed one at its first save."""
    (tmp_path / "notice.json").write_text(
        json.dumps({"kind": "spot_interruption", "deadline": "2026-03-01T12:02:00Z", "exit": True})
    )
    ck = Checkpointer(env=env)
    ck.save_json({}, step=1)
    assert ck.notice() is not None and not ck.should_exit()


@pytest.mark.parametrize(
    ("payload", "exit_after"),
    [
        ({"kind": "drain", "deadline": "2026-03-01T12:02:00+00:00", "seconds_left": 120}, True),
        ({"kind": "spot_interruption", "deadline": "2026-03-01T12:02:00Z"}, True),
        ({"kind": "rebalance", "deadline": "2026-03-01T12:02:00Z"}, False),
        ({"kind": "checkpoint", "deadline": None}, False),
        ({"kind": "drain", "deadline": "2026-03-01T12:02:00Z", "exit": False}, False),
    ],
)
def test_notice_without_an_exit_field_is_inferred(
    env: dict[str, str], tmp_path: Path, payload: dict[str, object], exit_after: bool
) -> None:
    (tmp_path / "notice.json").write_text(json.dumps(payload))
    notice = Checkpointer(env=env).notice()
    assert notice is not None and notice.exit is exit_after


def test_progress_is_throttled_and_read_by_the_agent(env: dict[str, str], tmp_path: Path) -> None:
    now = [0.0]
    ck = Checkpointer(env=env, progress_interval=5.0, monotonic=lambda: now[0])
    ck.report_progress(step=1, samples_per_s=10.0)
    progress = read_progress(tmp_path / "progress.json")
    assert progress is not None and progress.step == 1 and progress.samples_per_s == 10.0 and progress.attempt == 2
    now[0] = 4.9
    ck.report_progress(step=2)
    assert read_progress(tmp_path / "progress.json").step == 1  # type: ignore[union-attr]
    now[0] = 5.0
    ck.report_progress(step=3, loss=0.5)
    progress = read_progress(tmp_path / "progress.json")
    assert progress is not None and progress.step == 3 and progress.extra == {"loss": 0.5}
    assert progress.checkpoint is None


def test_a_save_reports_the_resume_pointer(env: dict[str, str], tmp_path: Path) -> None:
    ck = Checkpointer(env=env)
    path = ck.save_json({"step": 40}, step=40)
    progress = read_progress(tmp_path / "progress.json")
    assert progress is not None and progress.checkpoint is not None
    assert (progress.checkpoint.path, progress.checkpoint.step, progress.checkpoint.attempt) == (str(path), 40, 2)
    assert progress.to_dict()["checkpoint"]["step"] == 40


def test_read_progress_tolerates_garbage(tmp_path: Path) -> None:
    assert read_progress(tmp_path / "missing.json") is None
    (tmp_path / "p.json").write_text("[1, 2]")
    assert read_progress(tmp_path / "p.json") is None
    (tmp_path / "p.json").write_text('{"step": "many", "checkpoint": {"path": 3}}')
    progress = read_progress(tmp_path / "p.json")
    assert progress is not None and progress.step is None and progress.checkpoint is None


def test_exit_checkpointed_uses_the_documented_code(env: dict[str, str]) -> None:
    assert CHECKPOINTED_EXIT_CODE == 85
    with pytest.raises(SystemExit) as exited:
        Checkpointer(env=env).exit_checkpointed()
    assert exited.value.code == 85


def test_module_functions_use_one_default_helper(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(checkpoint, "_default", None)
    checkpoint.save_json({"step": 3}, step=3)
    latest = checkpoint.latest()
    assert latest is not None and latest.step == 3
    assert checkpoint.default() is checkpoint.default()
    assert checkpoint.default().job_id == "job-7"


def test_importing_the_helper_stays_light() -> None:
    code = (
        "import sys; import spotfleet.checkpoint; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('spotfleet', 'httpx', 'pydantic', 'yaml')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['spotfleet', 'spotfleet.checkpoint']"
