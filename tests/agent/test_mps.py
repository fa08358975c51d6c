"""MPS control daemons per GPU, against the stand-in ``nvidia-cuda-mps-control``
(tests/agent/stand_in_nvidia_cuda_mps_control.py), which records what it receives."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotfleet.agent.mps import MpsDaemon, MpsDaemons, client_env

STAND_IN = str(Path(__file__).with_name("stand_in_nvidia_cuda_mps_control.py"))


def commands(daemons: MpsDaemons, gpu: int) -> list[dict[str, object]]:
    path = daemons.root / f"gpu{gpu}" / "log" / "stand-in-commands.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[MpsDaemons]:
    d = MpsDaemons(root=tmp_path / "mps", control=STAND_IN)
    yield d
    d.stop_all()  # the stand-in's background "daemon" ends on quit


def test_one_daemon_per_gpu_with_its_own_pipes_and_the_gpu_by_uuid(daemons: MpsDaemons) -> None:
    d0 = daemons.ensure(0, "GPU-aaaa")
    d1 = daemons.ensure(1, "GPU-bbbb")
    assert isinstance(d0, MpsDaemon) and isinstance(d1, MpsDaemon)
    assert daemons.ensure(0, "GPU-aaaa") is d0  # started once
    (start0,) = commands(daemons, 0)
    assert start0["argv"] == ["-d"]
    assert start0["env"] == {"CUDA_VISIBLE_DEVICES": "GPU-aaaa", "CUDA_MPS_PIPE_DIRECTORY": str(d0.pipe_dir),
                             "CUDA_MPS_LOG_DIRECTORY": str(d0.log_dir)}  # fmt: skip
    assert d0.pipe_dir != d1.pipe_dir and (d0.pipe_dir / "nvidia-cuda-mps-control.pid").exists()
    daemons.stop(0)
    assert commands(daemons, 0)[-1]["stdin"] == ["quit"]
    assert not (d0.pipe_dir / "control").exists() and 0 not in daemons.running and 1 in daemons.running


def test_clients_get_their_share_of_threads_and_memory(daemons: MpsDaemons) -> None:
    d = daemons.ensure(0, "GPU-aaaa")
    assert isinstance(d, MpsDaemon)
    env = client_env(d, fraction=0.25, memory_limit_mib=5722.1)
    assert env == {"CUDA_MPS_PIPE_DIRECTORY": str(d.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(d.log_dir),
                   "CUDA_VISIBLE_DEVICES": "GPU-aaaa", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
                   "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=5722M"}  # fmt: skip
    # without NVML the daemon sees the GPU by index, and remaps it to device 0 for its clients
    by_index = daemons.ensure(3, "3")
    assert isinstance(by_index, MpsDaemon)
    assert client_env(by_index, fraction=0.5, memory_limit_mib=None)["CUDA_VISIBLE_DEVICES"] == "0"


def test_a_missing_or_failing_control_program_makes_mps_unavailable(tmp_path: Path) -> None:
    missing = MpsDaemons(root=tmp_path / "a", control=str(tmp_path / "no-such-program"))
    reason = missing.ensure(0, "GPU-aaaa")
    assert isinstance(reason, str) and "not found" in reason
    assert missing.report()["unavailable"] == {"0": reason}
    failing = MpsDaemons(root=tmp_path / "b", control=STAND_IN, base_env={**os.environ, "STAND_IN_MPS_FAIL": "1"})
    reason = failing.ensure(0, "GPU-aaaa")
    assert reason == f"{STAND_IN} -d failed: stand-in: cannot start the MPS control daemon (STAND_IN_MPS_FAIL=1)"
    assert failing.ensure(0, "GPU-aaaa") == reason and len(commands(failing, 0)) == 1  # not retried per job


def test_a_restarted_agent_adopts_the_daemon_already_serving_the_gpu(daemons: MpsDaemons) -> None:
    first = daemons.ensure(0, "GPU-aaaa")
    again = MpsDaemons(root=daemons.root, control=STAND_IN)
    assert isinstance(first, MpsDaemon) and again.ensure(0, "GPU-aaaa") == first
    assert len(commands(daemons, 0)) == 1  # no second "-d"
