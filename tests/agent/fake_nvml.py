"""A stand-in for nvidia-ml-py's ``pynvml`` module: the same function names,
constants and error types (the real ``pynvml`` error classes), backed by a
scripted set of GPUs. Not a MagicMock: a call it does not implement fails."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import pynvml

MIB = 1024 * 1024


@dataclass
class FakeProcess:
    pid: int
    usedGpuMemory: int | None


@dataclass
class FakeMigDevice:
    uuid: str
    gpu_slices: int
    compute_slices: int
    memory_total_mib: int
    memory_used_mib: int
    processes: list[FakeProcess] = field(default_factory=list)


@dataclass
class FakeGpu:
    name: str = "NVIDIA A10G"
    uuid: str = "GPU-0"
    utilization: int = 0
    memory_used_mib: int = 0
    memory_total_mib: int = 23028
    temperature: int = 40
    power_mw: int | None = 60_000  # None: NotSupported
    processes: list[FakeProcess] = field(default_factory=list)
    mig: list[FakeMigDevice | None] | None = None  # None: no MIG mode; a list: MIG enabled (None = empty slot)


def make_nvml(gpus: list[FakeGpu], *, driver: bool = True) -> types.ModuleType:
    m = types.ModuleType("fake_pynvml")
    state: dict[str, Any] = {"init": False, "init_calls": 0}
    for name in dir(pynvml):
        if name.startswith("NVMLError") or name.startswith("NVML_"):
            setattr(m, name, getattr(pynvml, name))

    def need_init() -> None:
        if not state["init"]:
            raise pynvml.NVMLError_Uninitialized()

    def nvmlInit() -> None:
        state["init_calls"] += 1
        if not driver:
            raise pynvml.NVMLError_LibraryNotFound()
        state["init"] = True

    def nvmlShutdown() -> None:
        need_init()
        state["init"] = False

    def nvmlSystemGetDriverVersion() -> str:
        need_init()
        return "550.54.15"

    def nvmlDeviceGetCount() -> int:
        need_init()
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(i: int) -> FakeGpu:
        need_init()
        if not 0 <= i < len(gpus):
            raise pynvml.NVMLError_InvalidArgument()
        return gpus[i]

    def nvmlDeviceGetName(h: FakeGpu) -> str:
        return h.name

    def nvmlDeviceGetUUID(h: FakeGpu | FakeMigDevice) -> str:
        return h.uuid

    def nvmlDeviceGetUtilizationRates(h: FakeGpu) -> Any:
        if h.mig is not None:
            raise pynvml.NVMLError_NotSupported()  # no utilisation counters in MIG mode
        return types.SimpleNamespace(gpu=h.utilization, memory=0)

    def nvmlDeviceGetMemoryInfo(h: FakeGpu | FakeMigDevice) -> Any:
        total, used = h.memory_total_mib * MIB, h.memory_used_mib * MIB
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetTemperature(h: FakeGpu, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError_InvalidArgument()
        return h.temperature

    def nvmlDeviceGetPowerUsage(h: FakeGpu) -> int:
        if h.power_mw is None:
            raise pynvml.NVMLError_NotSupported()
        return h.power_mw

    def nvmlDeviceGetComputeRunningProcesses(h: FakeGpu | FakeMigDevice) -> list[FakeProcess]:
        return list(h.processes)

    def nvmlDeviceGetMigMode(h: FakeGpu) -> tuple[int, int]:
        if h.mig is None:
            raise pynvml.NVMLError_NotSupported()
        return (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)

    def nvmlDeviceGetMaxMigDeviceCount(h: FakeGpu) -> int:
        return len(h.mig or [])

    def nvmlDeviceGetMigDeviceHandleByIndex(h: FakeGpu, i: int) -> FakeMigDevice:
        dev = (h.mig or [])[i]
        if dev is None:
            raise pynvml.NVMLError_NotFound()
        return dev

    def nvmlDeviceGetAttributes(h: FakeMigDevice) -> Any:
        return types.SimpleNamespace(gpuInstanceSliceCount=h.gpu_slices, computeInstanceSliceCount=h.compute_slices,
                                     memorySizeMB=h.memory_total_mib)  # fmt: skip

    for fn in (nvmlInit, nvmlShutdown, nvmlSystemGetDriverVersion, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
               nvmlDeviceGetName, nvmlDeviceGetUUID, nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo,
               nvmlDeviceGetTemperature, nvmlDeviceGetPowerUsage, nvmlDeviceGetComputeRunningProcesses,
               nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex,
               nvmlDeviceGetAttributes):  # fmt: skip
        assert hasattr(pynvml, fn.__name__), f"{fn.__name__} is not an nvidia-ml-py function"
        setattr(m, fn.__name__, fn)
    m.state = state  # type: ignore[attr-defined]
    return m
