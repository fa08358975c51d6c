"""GPU telemetry from NVML (nvidia-ml-py), sampled once per heartbeat.

What one sample holds (``GpuTelemetry.sample`` → the heartbeat's ``telemetry``)::

    {"nvml": {"available": true, "driver": "550.54.15", "reason": null},
     "gpus": [{"index": 0, "uuid": "GPU-…", "name": "NVIDIA A10G", "utilization_pct": 97.0,
               "memory_used_mib": 20311.0, "memory_total_mib": 23028.0, "temperature_c": 61,
               "power_w": 212.4, "mig": null | {"enabled": true, "devices": [...]},
               "processes": [{"pid": 4242, "memory_mib": 20300.0, "sm_util_pct": 95.0,
                              "job_id": "job-…", "attempt": 2, "node_rank": 0}]}],
     "jobs": [{"job_id": "job-…", "attempt": 2, "node_rank": 0, "gpu_indices": [0],
               "utilization_pct": 97.0, "memory_used_mib": 20300.0, "memory_source": "processes",
               "sm_util_pct": 95.0, "pids": [4242]}]}

Processes are attributed to jobs by process group: the runner starts every job
node in its own session (its group id is its pid), so ``os.getpgid(pid)`` of a
compute process names its job, whichever worker or data loader opened the GPU.
A job's utilisation is the mean over the GPUs it was assigned (its
``CUDA_VISIBLE_DEVICES``, which the agent sets in NVML's index order); its
memory is what its processes hold, or — when the driver hides PIDs (another
PID namespace) — what is used on its GPUs (``memory_source`` says which: only
per-process figures are fit to hold a job to a memory share). A job's
``sm_util_pct`` is the SM time its processes got (``nvmlDeviceGetProcessUtilization``,
samples since the previous sample): on a shared GPU, its utilisation share.
MIG layout is read here, never changed (``partitions.py`` changes it).
A process NVML lists both on a MIG device and on its parent GPU is counted once.

With no NVIDIA driver (``NVMLError_LibraryNotFound``, ``DriverNotLoaded``…) the
collector logs it once, reports ``{"nvml": {"available": false, "reason": …}}``
and never tries again; a metric one GPU does not support is ``null``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class JobGroup:
    """A running job node as the runner knows it."""

    job_id: str
    attempt: int
    node_rank: int
    pgid: int
    gpu_indices: tuple[int, ...]


def job_groups(runner: Any) -> list[JobGroup]:
    """The runner's live job processes (``JobRunner.procs``), as telemetry needs them."""
    out = []
    for proc in list(runner.procs.values()):
        if proc.exit_code is not None:
            continue
        a = proc.assignment
        out.append(JobGroup(a.job_id, a.attempt, a.node_rank, proc.popen.pid, tuple(a.gpu_indices)))
    return out


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


class GpuTelemetry:
    def __init__(self, nvml: ModuleType | None = None, *, pgid_of: Callable[[int], int | None] = _pgid) -> None:
        self._nvml = nvml
        self._pgid_of = pgid_of
        self._ready = False
        self.unavailable: str | None = None
        self.driver: str | None = None
        self._util_since: dict[int, int] = {}  # GPU index -> NVML timestamp (µs) of the newest process sample

    def _init(self) -> ModuleType | None:
        if self._ready:
            return self._nvml
        if self.unavailable is not None:
            return None
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                self._give_up(f"nvidia-ml-py is not installed ({exc})")
                return None
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            self.driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as exc:  # LibraryNotFound, DriverNotLoaded, NoPermission...
            self._give_up(f"{type(exc).__name__}: {exc}")
            return None
        self._ready = True
        return self._nvml

    def nvml(self) -> ModuleType | None:
        """The initialised NVML module, or None without a driver (shared with ``partitions.py``)."""
        return self._init()

    def _give_up(self, reason: str) -> None:
        self.unavailable = reason
        log.info("no NVIDIA driver here (%s): GPU telemetry is off, everything else carries on", reason)

    def close(self) -> None:
        if self._ready and self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._ready = False

    def sample(self, groups: Iterable[JobGroup] = ()) -> dict[str, Any]:
        nvml = self._init()
        if nvml is None:
            return {"nvml": {"available": False, "reason": self.unavailable, "driver": None}}
        groups = list(groups)
        by_pgid = {g.pgid: g for g in groups}
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(self._gpu(nvml, index, handle, by_pgid))
        return {
            "nvml": {"available": True, "reason": None, "driver": self.driver},
            "gpus": gpus,
            "jobs": [_job_view(g, gpus) for g in groups],
        }

    def _gpu(self, nvml: ModuleType, index: int, handle: Any, by_pgid: dict[int, JobGroup]) -> dict[str, Any]:
        def get(fn: Callable[..., Any], *args: Any) -> Any:
            try:
                return fn(handle, *args)
            except nvml.NVMLError:  # NotSupported on this GPU (or in MIG mode), GPU lost...
                return None

        util = get(nvml.nvmlDeviceGetUtilizationRates)
        mem = get(nvml.nvmlDeviceGetMemoryInfo)
        power = get(nvml.nvmlDeviceGetPowerUsage)
        mig = self._mig(nvml, handle)
        procs = list(get(nvml.nvmlDeviceGetComputeRunningProcesses) or [])
        for dev in (mig or {}).get("handles", []):
            try:
                procs.extend(nvml.nvmlDeviceGetComputeRunningProcesses(dev))
            except nvml.NVMLError:
                continue
        if mig is not None:
            mig.pop("handles", None)
        unique: dict[int, Any] = {}
        for p in procs:
            unique.setdefault(p.pid, p)
        sm = self._process_sm(nvml, index, handle)
        return {
            "index": index,
            "uuid": _text(get(nvml.nvmlDeviceGetUUID)),
            "name": _text(get(nvml.nvmlDeviceGetName)),
            "utilization_pct": float(util.gpu) if util is not None else None,
            "memory_used_mib": mem.used / MIB if mem is not None else None,
            "memory_total_mib": mem.total / MIB if mem is not None else None,
            "temperature_c": get(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
            "power_w": power / 1000.0 if power is not None else None,
            "mig": mig,
            "processes": [self._process(p, by_pgid, sm.get(p.pid)) for p in unique.values()],
        }

    def _process_sm(self, nvml: ModuleType, index: int, handle: Any) -> dict[int, float]:
        """pid → mean SM utilisation (%) over NVML's samples since the last call."""
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, self._util_since.get(index, 0))
        except nvml.NVMLError:  # NotFound: no sample since; NotSupported: MIG mode, old GPU
            return {}
        by_pid: dict[int, list[float]] = {}
        for s in samples:
            by_pid.setdefault(int(s.pid), []).append(float(s.smUtil))
            self._util_since[index] = max(self._util_since.get(index, 0), int(s.timeStamp))
        return {pid: sum(v) / len(v) for pid, v in by_pid.items()}

    def _process(self, p: Any, by_pgid: dict[int, JobGroup], sm: float | None) -> dict[str, Any]:
        used = getattr(p, "usedGpuMemory", None)
        group = by_pgid.get(self._pgid_of(p.pid) or -1)
        return {
            "pid": p.pid,
            "memory_mib": used / MIB if isinstance(used, int) else None,
            "sm_util_pct": sm,
            "job_id": group.job_id if group else None,
            "attempt": group.attempt if group else None,
            "node_rank": group.node_rank if group else None,
        }

    def _mig(self, nvml: ModuleType, handle: Any) -> dict[str, Any] | None:
        """The MIG layout, read-only; None when the GPU has no MIG mode."""
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError:
            return None
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return {"enabled": False, "devices": [], "handles": []}
        devices, handles = [], []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                dev = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except nvml.NVMLError:  # NotFound: an empty slot
                continue
            handles.append(dev)
            attrs = nvml.nvmlDeviceGetAttributes(dev)
            mem = nvml.nvmlDeviceGetMemoryInfo(dev)
            devices.append({
                "index": i, "uuid": _text(nvml.nvmlDeviceGetUUID(dev)),
                "gpu_slices": attrs.gpuInstanceSliceCount, "compute_slices": attrs.computeInstanceSliceCount,
                "memory_total_mib": mem.total / MIB, "memory_used_mib": mem.used / MIB,
            })  # fmt: skip
        return {"enabled": True, "devices": devices, "handles": handles}


def _job_view(g: JobGroup, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    mine = [gpu for gpu in gpus if gpu["index"] in g.gpu_indices]
    utils = [gpu["utilization_pct"] for gpu in mine if gpu["utilization_pct"] is not None]
    procs = [p for gpu in gpus for p in gpu["processes"]
             if p["job_id"] == g.job_id and p["attempt"] == g.attempt and p["node_rank"] == g.node_rank]  # fmt: skip
    proc_mem = [p["memory_mib"] for p in procs if p["memory_mib"] is not None]
    source: str | None = "processes"
    if proc_mem:
        memory: float | None = sum(proc_mem)
    else:
        used = [gpu["memory_used_mib"] for gpu in mine if gpu["memory_used_mib"] is not None]
        memory = sum(used) if used else None
        source = "gpus" if used else None
    sm = [p["sm_util_pct"] for p in procs if p.get("sm_util_pct") is not None]
    return {
        "job_id": g.job_id, "attempt": g.attempt, "node_rank": g.node_rank, "gpu_indices": list(g.gpu_indices),
        "utilization_pct": sum(utils) / len(utils) if utils else None, "memory_used_mib": memory,
        "memory_total_mib": sum(gpu["memory_total_mib"] or 0.0 for gpu in mine) or None, "memory_source": source,
        "sm_util_pct": sum(sm) if sm else None, "pids": sorted({p["pid"] for p in procs}),
    }  # fmt: skip


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
