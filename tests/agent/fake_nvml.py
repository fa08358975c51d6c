"""A stand-in for nvidia-ml-py's ``pynvml`` module: the same function names,
constants and error types (the real ``pynvml`` error classes), backed by a
scripted set of GPUs. Not a MagicMock: a call it does not implement fails,
and every function it defines is checked to exist in the real ``pynvml``.

MIG is modelled the way NVML exposes it: a MIG-capable GPU has a MIG mode
(current, pending); in MIG mode it holds GPU instances (created from a
profile id found with ``nvmlDeviceGetGpuInstanceProfileInfo``), each holding
compute instances; every GPU+compute instance pair is a MIG device with its
own ``MIG-…`` UUID, listed by ``nvmlDeviceGetMigDeviceHandleByIndex``.
Profile ids, names and memory sizes are an A100's (40 or 80 GB). Creating
more than the GPU's 7 slices raises ``NVMLError_InsufficientResources``;
destroying an instance a process uses raises ``NVMLError_InUse``; a GPU with
``mig_admin=False`` refuses changes with ``NVMLError_NoPermission``.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

MIB = 1024 * 1024

# NVML_GPU_INSTANCE_PROFILE_* constant → (profile id, name, slices, memory MiB), as an A100 reports them
A100_40GB_PROFILES: dict[int, tuple[int, str, int, int]] = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (19, "1g.5gb", 1, 4864),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (20, "1g.5gb+me", 1, 4864),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: (15, "1g.10gb", 1, 9856),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (14, "2g.10gb", 2, 9856),
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (9, "3g.20gb", 3, 19968),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (5, "4g.20gb", 4, 19968),
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: (0, "7g.40gb", 7, 40192),
}
A100_80GB_PROFILES: dict[int, tuple[int, str, int, int]] = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (19, "1g.10gb", 1, 9728),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: (15, "1g.20gb", 1, 19968),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (14, "2g.20gb", 2, 19968),
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (9, "3g.40gb", 3, 40192),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (5, "4g.40gb", 4, 40192),
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: (0, "7g.80gb", 7, 80896),
}
CI_PROFILE_SLICES = {
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
}


@dataclass
class FakeProcess:
    pid: int
    usedGpuMemory: int | None
    sm_util: int | None = None  # percent, for nvmlDeviceGetProcessUtilization (None: no sample)


@dataclass
class FakeMigDevice:
    uuid: str
    gpu_slices: int
    compute_slices: int
    memory_total_mib: int
    memory_used_mib: int
    processes: list[FakeProcess] = field(default_factory=list)
    profile: str | None = None  # e.g. "1g.5gb"; found from slices and memory when None
    gpu_instance_id: int = -1
    compute_instance_id: int = 0


@dataclass
class FakeGpuInstance:
    gpu: FakeGpu
    id: int
    profile_id: int
    name: str
    slices: int
    memory_mib: int
    compute: dict[int, FakeComputeInstance] = field(default_factory=dict)


@dataclass
class FakeComputeInstance:
    gpu_instance: FakeGpuInstance
    id: int
    device: FakeMigDevice


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
    mig: list[FakeMigDevice | None] | None = None  # None: no MIG mode; a list: MIG-capable (None = empty slot)
    mig_enabled: bool = True  # the current MIG mode of a MIG-capable GPU
    mig_pending: bool | None = None  # the pending mode (after a reset); None: same as current
    mig_admin: bool = True  # may GPU/compute instances be created and destroyed (root)?
    process_source: Callable[[FakeGpu | FakeMigDevice], list[FakeProcess]] | None = None  # dynamic processes
    gpu_instances: dict[int, FakeGpuInstance] = field(default_factory=dict)

    @property
    def profiles(self) -> dict[int, tuple[int, str, int, int]]:
        return A100_80GB_PROFILES if self.memory_total_mib > 60_000 else A100_40GB_PROFILES


def mig_a100(uuid: str = "GPU-a100", *, layout: list[str] | None = None, enabled: bool = True,
             memory_total_mib: int = 40960, admin: bool = True) -> FakeGpu:  # fmt: skip
    """An A100 in MIG mode with ``layout``'s devices already created (GPU + compute instances)."""
    gpu = FakeGpu(name="NVIDIA A100-SXM4-40GB" if memory_total_mib < 60_000 else "NVIDIA A100-SXM4-80GB", uuid=uuid,
                  memory_total_mib=memory_total_mib, mig=[], mig_enabled=enabled, mig_admin=admin)  # fmt: skip
    by_name = {p[1]: p for p in gpu.profiles.values()}
    for profile in layout or []:
        pid, name, slices, mem = by_name[profile]
        _create_pair(gpu, pid, name, slices, mem)
    return gpu


def _create_pair(gpu: FakeGpu, profile_id: int, name: str, slices: int, memory_mib: int) -> FakeComputeInstance:
    gi = FakeGpuInstance(gpu, _next_gi(gpu), profile_id, name, slices, memory_mib)
    gpu.gpu_instances[gi.id] = gi
    return _create_ci(gi)


def _next_gi(gpu: FakeGpu) -> int:
    return next(i for i in itertools.count(1) if i not in gpu.gpu_instances)


def _create_ci(gi: FakeGpuInstance) -> FakeComputeInstance:
    ci_id = next(i for i in itertools.count(0) if i not in gi.compute)
    dev = FakeMigDevice(f"MIG-{gi.gpu.uuid.removeprefix('GPU-')}-{gi.id}-{ci_id}", gi.slices, gi.slices,
                        gi.memory_mib, 0, profile=gi.name, gpu_instance_id=gi.id, compute_instance_id=ci_id)  # fmt: skip
    ci = FakeComputeInstance(gi, ci_id, dev)
    gi.compute[ci_id] = ci
    devices = gi.gpu.mig if gi.gpu.mig is not None else []
    gi.gpu.mig = devices
    hole = next((i for i, d in enumerate(devices) if d is None), None)
    if hole is None:
        devices.append(dev)
    else:
        devices[hole] = dev
    return ci


def _adopt_listed_devices(gpu: FakeGpu) -> None:
    """Devices a test listed by hand get the GPU instances NVML would show for them."""
    for dev in gpu.mig or []:
        if dev is None or dev.gpu_instance_id in gpu.gpu_instances:
            continue
        match = next(
            (p for p in gpu.profiles.values()
             if (dev.profile is not None and p[1] == dev.profile)
             or (dev.profile is None and p[2] == dev.gpu_slices and abs(p[3] - dev.memory_total_mib) < 1024)),
            None,
        )  # fmt: skip
        pid, name, slices, mem = match or (99, f"{dev.gpu_slices}g.custom", dev.gpu_slices, dev.memory_total_mib)
        gi = FakeGpuInstance(gpu, _next_gi(gpu), pid, name, slices, mem)
        gpu.gpu_instances[gi.id] = gi
        dev.gpu_instance_id, dev.compute_instance_id = gi.id, 0
        dev.profile = dev.profile or (name if match else None)
        gi.compute[0] = FakeComputeInstance(gi, 0, dev)


def make_nvml(gpus: list[FakeGpu], *, driver: bool = True) -> types.ModuleType:
    m = types.ModuleType("fake_pynvml")
    state: dict[str, Any] = {"init": False, "init_calls": 0, "calls": []}
    for name in dir(pynvml):
        if name.startswith("NVMLError") or name.startswith("NVML_"):
            setattr(m, name, getattr(pynvml, name))
    for gpu in gpus:
        _adopt_listed_devices(gpu)

    def need_init() -> None:
        if not state["init"]:
            raise pynvml.NVMLError_Uninitialized()

    def record(name: str, *args: Any) -> None:
        state["calls"].append((name, *args))

    def processes_of(h: FakeGpu | FakeMigDevice) -> list[FakeProcess]:
        owner = h if isinstance(h, FakeGpu) else next((g for g in gpus if h in (g.mig or [])), None)
        if owner is not None and owner.process_source is not None:
            return owner.process_source(h)
        return list(h.processes)

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
        if h.mig is not None and h.mig_enabled:
            raise pynvml.NVMLError_NotSupported()  # no utilisation counters in MIG mode
        return types.SimpleNamespace(gpu=h.utilization, memory=0)

    def nvmlDeviceGetMemoryInfo(h: FakeGpu | FakeMigDevice) -> Any:
        total, used = h.memory_total_mib * MIB, h.memory_used_mib * MIB
        if isinstance(h, FakeGpu) and h.process_source is not None:
            used = sum(p.usedGpuMemory or 0 for p in processes_of(h))
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
        return processes_of(h)

    def nvmlDeviceGetProcessUtilization(h: FakeGpu, timeStamp: int) -> list[Any]:
        if h.mig is not None and h.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        samples = [types.SimpleNamespace(pid=p.pid, timeStamp=timeStamp + 1, smUtil=p.sm_util, memUtil=0, encUtil=0,
                                         decUtil=0) for p in processes_of(h) if p.sm_util is not None]  # fmt: skip
        if not samples:
            raise pynvml.NVMLError_NotFound()  # NVML: no valid sample since timeStamp
        return samples

    def nvmlDeviceGetMigMode(h: FakeGpu) -> list[int]:
        if h.mig is None:
            raise pynvml.NVMLError_NotSupported()
        mode = {True: pynvml.NVML_DEVICE_MIG_ENABLE, False: pynvml.NVML_DEVICE_MIG_DISABLE}
        pending = h.mig_enabled if h.mig_pending is None else h.mig_pending
        return [mode[h.mig_enabled], mode[pending]]

    def nvmlDeviceGetMaxMigDeviceCount(h: FakeGpu) -> int:
        return 7 if h.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(h: FakeGpu, i: int) -> FakeMigDevice:
        devices = h.mig or []
        if not h.mig_enabled or i >= len(devices) or devices[i] is None:
            raise pynvml.NVMLError_NotFound()
        dev = devices[i]
        assert dev is not None
        return dev

    def nvmlDeviceGetAttributes(h: FakeMigDevice) -> Any:
        return types.SimpleNamespace(gpuInstanceSliceCount=h.gpu_slices, computeInstanceSliceCount=h.compute_slices,
                                     memorySizeMB=h.memory_total_mib)  # fmt: skip

    def nvmlDeviceGetGpuInstanceId(h: FakeMigDevice) -> int:
        if not isinstance(h, FakeMigDevice):
            raise pynvml.NVMLError_InvalidArgument()
        return h.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(h: FakeMigDevice) -> int:
        if not isinstance(h, FakeMigDevice):
            raise pynvml.NVMLError_InvalidArgument()
        return h.compute_instance_id

    def nvmlDeviceGetGpuInstanceProfileInfo(h: FakeGpu, profile: int, version: int = 2) -> Any:
        if h.mig is None:
            raise pynvml.NVMLError_NotSupported()
        found = h.profiles.get(profile)
        if found is None:
            raise pynvml.NVMLError_NotSupported()
        pid, name, slices, mem = found
        return types.SimpleNamespace(version=version, id=pid, isP2pSupported=0, sliceCount=slices,
                                     instanceCount=7 // slices, multiprocessorCount=14 * slices, copyEngineCount=1,
                                     decoderCount=0, encoderCount=0, jpegCount=0, ofaCount=0, memorySizeMB=mem,
                                     name=f"MIG {name}".encode())  # fmt: skip

    def nvmlDeviceCreateGpuInstance(h: FakeGpu, profileId: int) -> FakeGpuInstance:
        record("nvmlDeviceCreateGpuInstance", h.uuid, profileId)
        if h.mig is None or not h.mig_enabled:
            raise pynvml.NVMLError_InvalidState()
        if not h.mig_admin:
            raise pynvml.NVMLError_NoPermission()
        found = next((p for p in h.profiles.values() if p[0] == profileId), None)
        if found is None:
            raise pynvml.NVMLError_InvalidArgument()
        pid, name, slices, mem = found
        if sum(gi.slices for gi in h.gpu_instances.values()) + slices > 7:
            raise pynvml.NVMLError_InsufficientResources()
        gi = FakeGpuInstance(h, _next_gi(h), pid, name, slices, mem)
        h.gpu_instances[gi.id] = gi
        return gi

    def nvmlDeviceGetGpuInstanceById(h: FakeGpu, gpuInstanceId: int) -> FakeGpuInstance:
        gi = h.gpu_instances.get(gpuInstanceId)
        if gi is None:
            raise pynvml.NVMLError_NotFound()
        return gi

    def nvmlGpuInstanceGetInfo(gi: FakeGpuInstance) -> Any:
        return types.SimpleNamespace(device=gi.gpu, id=gi.id, profileId=gi.profile_id,
                                     placement=types.SimpleNamespace(start=0, size=gi.slices))  # fmt: skip

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(gi: FakeGpuInstance, profile: int, engProfile: int,
                                                     version: int = 2) -> Any:  # fmt: skip
        slices = CI_PROFILE_SLICES.get(profile)
        if slices is None or slices > gi.slices or engProfile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise pynvml.NVMLError_NotSupported()
        return types.SimpleNamespace(version=version, id=profile, sliceCount=slices, instanceCount=gi.slices // slices,
                                     multiprocessorCount=14 * slices, name=f"MIG {slices}c.{gi.name}".encode())  # fmt: skip

    def nvmlGpuInstanceCreateComputeInstance(gi: FakeGpuInstance, profileId: int) -> FakeComputeInstance:
        record("nvmlGpuInstanceCreateComputeInstance", gi.gpu.uuid, gi.id, profileId)
        if not gi.gpu.mig_admin:
            raise pynvml.NVMLError_NoPermission()
        if CI_PROFILE_SLICES.get(profileId) != gi.slices or gi.compute:
            raise pynvml.NVMLError_InsufficientResources()
        return _create_ci(gi)

    def nvmlGpuInstanceGetComputeInstanceById(gi: FakeGpuInstance, computeInstanceId: int) -> FakeComputeInstance:
        ci = gi.compute.get(computeInstanceId)
        if ci is None:
            raise pynvml.NVMLError_NotFound()
        return ci

    def nvmlComputeInstanceDestroy(ci: FakeComputeInstance) -> int:
        record("nvmlComputeInstanceDestroy", ci.gpu_instance.gpu.uuid, ci.gpu_instance.id, ci.id)
        gpu = ci.gpu_instance.gpu
        if not gpu.mig_admin:
            raise pynvml.NVMLError_NoPermission()
        if processes_of(ci.device):
            raise pynvml.NVMLError_InUse()
        del ci.gpu_instance.compute[ci.id]
        gpu.mig = [None if d is ci.device else d for d in gpu.mig or []]
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceDestroy(gi: FakeGpuInstance) -> int:
        record("nvmlGpuInstanceDestroy", gi.gpu.uuid, gi.id)
        if not gi.gpu.mig_admin:
            raise pynvml.NVMLError_NoPermission()
        if gi.compute:
            raise pynvml.NVMLError_InUse()
        del gi.gpu.gpu_instances[gi.id]
        return pynvml.NVML_SUCCESS

    for fn in (nvmlInit, nvmlShutdown, nvmlSystemGetDriverVersion, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
               nvmlDeviceGetName, nvmlDeviceGetUUID, nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo,
               nvmlDeviceGetTemperature, nvmlDeviceGetPowerUsage, nvmlDeviceGetComputeRunningProcesses,
               nvmlDeviceGetProcessUtilization, nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount,
               nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetAttributes, nvmlDeviceGetGpuInstanceId,
               nvmlDeviceGetComputeInstanceId, nvmlDeviceGetGpuInstanceProfileInfo, nvmlDeviceCreateGpuInstance,
               nvmlDeviceGetGpuInstanceById, nvmlGpuInstanceGetInfo, nvmlGpuInstanceGetComputeInstanceProfileInfo,
               nvmlGpuInstanceCreateComputeInstance, nvmlGpuInstanceGetComputeInstanceById,
               nvmlComputeInstanceDestroy, nvmlGpuInstanceDestroy):  # fmt: skip
        assert hasattr(pynvml, fn.__name__), f"{fn.__name__} is not an nvidia-ml-py function"
        setattr(m, fn.__name__, fn)
    m.state = state  # type: ignore[attr-defined]
    return m
