"""CUDA MPS for fractional jobs: one control daemon per GPU, a share per client.

For a job with ``gpu_fraction`` the agent starts (once per GPU, on first need)
``nvidia-cuda-mps-control -d`` with that GPU alone visible and a pipe and log
directory of its own (``<work_dir>/mps/gpu<N>/{pipe,log}``), so jobs on
different GPUs reach different daemons and a daemon's limits never leak to
another GPU. Each job is then started as an MPS client of its GPU's daemon:

- ``CUDA_MPS_PIPE_DIRECTORY`` / ``CUDA_MPS_LOG_DIRECTORY``: its GPU's daemon;
- ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: its share of the SMs (fraction × 100);
- ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: its share of the memory, ``0=<MiB>M``
  (device 0 is the only device it sees).

Design choice: the daemon and its clients name the GPU by UUID. A daemon
started with ``CUDA_VISIBLE_DEVICES=<index>`` remaps that GPU to device 0 for
its clients, so a client that kept the index would see no device; a UUID
means the same GPU to both. Without NVML (no UUID) the daemon gets the index
and its clients ``0``.

When the daemon cannot be started (no ``nvidia-cuda-mps-control`` on the
PATH, or it exits non-zero) the reason is kept per GPU and the job runs
time-sliced: it still gets its GPU, without limits, and the agent reports
``time-sliced`` so explain and the ledger say "shared, not isolated". The
daemon is told ``quit`` when the last MPS job on its GPU is gone and when the
agent stops.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
MPS_CONTROL = "nvidia-cuda-mps-control"
Runner = Callable[..., subprocess.CompletedProcess[str]]


@dataclass(frozen=True, slots=True)
class MpsDaemon:
    gpu_index: int
    gpu_id: str  # GPU-<uuid>, or the index when NVML gave no UUID
    pipe_dir: Path
    log_dir: Path

    @property
    def client_device(self) -> str:
        """What a client's CUDA_VISIBLE_DEVICES must say to see this daemon's GPU."""
        return self.gpu_id if self.gpu_id.startswith("GPU-") else "0"

    def env(self) -> dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}


def client_env(daemon: MpsDaemon, *, fraction: float, memory_limit_mib: float | None) -> dict[str, str]:
    """The environment of a job that holds ``fraction`` of ``daemon``'s GPU."""
    env = {**daemon.env(), "CUDA_VISIBLE_DEVICES": daemon.client_device,
           "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, min(100, round(fraction * 100))))}  # fmt: skip
    if memory_limit_mib:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={max(1, int(memory_limit_mib))}M"
    return env


class MpsDaemons:
    def __init__(self, *, root: Path, control: str = MPS_CONTROL, run: Runner = subprocess.run,
                 base_env: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.root = root
        self.control = control
        self._run = run
        self._base_env = dict(base_env) if base_env is not None else dict(os.environ)
        self.running: dict[int, MpsDaemon] = {}
        self.unavailable: dict[int, str] = {}  # GPU index -> why no daemon runs there

    def ensure(self, gpu_index: int, gpu_id: str) -> MpsDaemon | str:
        """The daemon of ``gpu_index`` (started if needed), or why there is none."""
        found = self.running.get(gpu_index)
        if found is not None:
            return found
        if gpu_index in self.unavailable:
            return self.unavailable[gpu_index]
        base = self.root / f"gpu{gpu_index}"
        daemon = MpsDaemon(gpu_index, gpu_id, base / "pipe", base / "log")
        daemon.pipe_dir.mkdir(parents=True, exist_ok=True)
        daemon.log_dir.mkdir(parents=True, exist_ok=True)
        if _daemon_alive(daemon.pipe_dir):  # left by an earlier agent on this node (restarted by systemd)
            self.running[gpu_index] = daemon
            return daemon
        env = {**self._base_env, **daemon.env(), "CUDA_VISIBLE_DEVICES": gpu_id}
        try:
            done = self._run([self.control, "-d"], env=env, capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)  # fmt: skip
        except FileNotFoundError:
            return self._unavailable(gpu_index, f"{self.control} not found (MPS needs the NVIDIA driver's utilities)")
        except (OSError, subprocess.TimeoutExpired) as exc:
            return self._unavailable(gpu_index, f"{self.control} -d failed: {exc}")
        if done.returncode != 0:
            why = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            return self._unavailable(gpu_index, f"{self.control} -d failed: {why[0]}")
        self.running[gpu_index] = daemon
        log.info("MPS control daemon started for GPU %s (%s), pipes in %s", gpu_index, gpu_id, daemon.pipe_dir)
        return daemon

    def _unavailable(self, gpu_index: int, reason: str) -> str:
        self.unavailable[gpu_index] = reason
        log.warning("MPS unavailable on GPU %s: %s; fractional jobs there run time-sliced", gpu_index, reason)
        return reason

    def stop(self, gpu_index: int) -> None:
        daemon = self.running.pop(gpu_index, None)
        if daemon is None:
            return
        env = {**self._base_env, **daemon.env(), "CUDA_VISIBLE_DEVICES": daemon.gpu_id}
        try:
            self._run([self.control], input="quit\n", env=env, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("could not stop the MPS daemon of GPU %s: %s", gpu_index, exc)

    def stop_all(self) -> None:
        for gpu_index in list(self.running):
            self.stop(gpu_index)

    def report(self) -> dict[str, Any]:
        return {
            "running": {str(i): str(d.pipe_dir) for i, d in sorted(self.running.items())},
            "unavailable": {str(i): why for i, why in sorted(self.unavailable.items())},
        }


def _daemon_alive(pipe_dir: Path) -> bool:
    """Is a control daemon serving ``pipe_dir``? (It writes its pid there.)"""
    try:
        pid = int((pipe_dir / "nvidia-cuda-mps-control.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True
