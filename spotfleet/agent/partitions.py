"""MIG on the node: read the GPUs' MIG devices through NVML, lay them out as the
pool declares when allowed, and hand each MIG job a device of its own.

What the controller sends (``HeartbeatResponse.mig``, a ``MigOrder``): the
layout every GPU of this instance should have, e.g. seven ``1g.5gb``, and
whether the agent may change a GPU that differs. ``MigNode.apply`` compares
each GPU's devices with it and

- leaves a GPU that matches alone;
- when it differs and reconfiguration is allowed and nothing runs on that
  GPU, destroys its compute and GPU instances and creates the declared ones
  (``nvmlDeviceCreateGpuInstance`` then ``nvmlGpuInstanceCreateComputeInstance``,
  one full-size compute instance per GPU instance, largest profiles first);
- otherwise reports the instance *unfit* (``report()["unfit"]``, profile or
  ``*`` → reason), which the controller turns into "no MIG jobs on this
  instance type" and ``explain`` shows.

MIG *mode* is never changed: enabling it needs a GPU reset, an operator's
decision (``nvidia-smi -i N -mig 1``). ``allocate`` gives a job node the
lowest-indexed free MIG device of its profile on its GPU; the job gets
``CUDA_VISIBLE_DEVICES=MIG-<uuid>``. Without a declared layout, allocation
uses whatever devices the GPU has.

The NVML calls used, all from nvidia-ml-py: ``nvmlDeviceGetMigMode``,
``nvmlDeviceGetMaxMigDeviceCount``, ``nvmlDeviceGetMigDeviceHandleByIndex``,
``nvmlDeviceGetUUID``, ``nvmlDeviceGetGpuInstanceId``,
``nvmlDeviceGetComputeInstanceId``, ``nvmlDeviceGetGpuInstanceById``,
``nvmlGpuInstanceGetInfo``, ``nvmlDeviceGetGpuInstanceProfileInfo`` (names and
ids of the profiles), ``nvmlDeviceGetComputeRunningProcesses``,
``nvmlGpuInstanceGetComputeInstanceById``, ``nvmlComputeInstanceDestroy``,
``nvmlGpuInstanceDestroy``, ``nvmlDeviceCreateGpuInstance``,
``nvmlGpuInstanceGetComputeInstanceProfileInfo``,
``nvmlGpuInstanceCreateComputeInstance``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import ModuleType
from typing import Any

from spotfleet.model.partition import layout_text, sort_layout
from spotfleet.model.spec import MIG_PROFILES
from spotfleet.wire import AgentEvent, MigOrder

log = logging.getLogger(__name__)
Key = tuple[str, int, int]  # job id, attempt, node rank
ALL = "*"


@dataclass(frozen=True, slots=True)
class MigDevice:
    gpu_index: int
    index: int  # its index on the GPU (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str  # MIG-…: what CUDA_VISIBLE_DEVICES takes
    profile: str | None  # 1g.5gb…; None when NVML names no profile we know
    memory_mib: float
    busy: bool  # a compute process runs on it


@dataclass(frozen=True, slots=True)
class GpuMig:
    index: int
    name: str
    enabled: bool | None  # None: the GPU has no MIG mode
    pending: bool | None
    devices: tuple[MigDevice, ...] = ()

    @property
    def layout(self) -> tuple[str, ...]:
        return sort_layout([d.profile or "?" for d in self.devices])


class MigNode:
    def __init__(self, nvml: Callable[[], ModuleType | None], *, now: Callable[[], datetime]) -> None:
        self._nvml = nvml  # GpuTelemetry.nvml: the initialised module or None
        self._now = now
        self.order: MigOrder | None = None
        self.unfit: dict[str, str] = {}
        self.allocated: dict[Key, MigDevice] = {}
        self._applied: MigOrder | None = None

    # ------------------------------------------------------------ read

    def gpus(self) -> list[GpuMig]:
        nvml = self._nvml()
        if nvml is None:
            return []
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            out.append(self._read_gpu(nvml, i, nvml.nvmlDeviceGetHandleByIndex(i)))
        return out

    def _read_gpu(self, nvml: ModuleType, index: int, handle: Any) -> GpuMig:
        name = _text(nvml.nvmlDeviceGetName(handle)) or f"GPU {index}"
        try:
            current, pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError:
            return GpuMig(index, name, None, None)
        enabled = current == nvml.NVML_DEVICE_MIG_ENABLE
        if not enabled:
            return GpuMig(index, name, False, pending == nvml.NVML_DEVICE_MIG_ENABLE)
        names = _profile_names(nvml, handle)
        devices = []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                dev = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except nvml.NVMLError:  # NotFound: an empty slot
                continue
            profile = None
            try:
                gi = nvml.nvmlDeviceGetGpuInstanceById(handle, nvml.nvmlDeviceGetGpuInstanceId(dev))
                profile = names.get(int(nvml.nvmlGpuInstanceGetInfo(gi).profileId))
            except nvml.NVMLError:
                pass
            try:
                busy = bool(nvml.nvmlDeviceGetComputeRunningProcesses(dev))
            except nvml.NVMLError:
                busy = False
            mem = nvml.nvmlDeviceGetMemoryInfo(dev)
            devices.append(MigDevice(index, i, _text(nvml.nvmlDeviceGetUUID(dev)) or "", profile,
                                     mem.total / (1024 * 1024), busy))  # fmt: skip
        return GpuMig(index, name, True, pending == nvml.NVML_DEVICE_MIG_ENABLE, tuple(devices))

    # ------------------------------------------------------------ lay out

    def apply(self, order: MigOrder | None) -> list[AgentEvent]:
        """Make every GPU match ``order`` (or say why not). Idempotent: a layout
        already in place, or an order already applied, costs a read at most."""
        self.order = order
        if order is None:
            self.unfit = {}
            self._applied = None
            return []
        if self._applied == order and not self.unfit:
            return []
        nvml = self._nvml()
        if nvml is None:
            self.unfit = {ALL: "no NVIDIA driver (NVML unavailable): MIG devices cannot be read"}
            return []
        want = sort_layout(list(order.layout))
        unfit: dict[str, str] = {}
        events: list[AgentEvent] = []
        for gpu in self.gpus():
            reason = self._unfit_gpu(gpu, want, order)
            if reason is None and gpu.layout != want:
                reason = self._reconfigure(nvml, gpu, want, events)
            if reason is not None:
                unfit.setdefault(ALL, reason)
        self.unfit = unfit
        self._applied = order if not unfit else None
        if unfit:
            log.warning("MIG layout %s cannot be had here: %s", layout_text(want), unfit[ALL])
        return events

    def _unfit_gpu(self, gpu: GpuMig, want: tuple[str, ...], order: MigOrder) -> str | None:
        if gpu.enabled is None:
            return f"GPU {gpu.index} ({gpu.name}) has no MIG mode"
        if not gpu.enabled:
            pending = " (enabled after a reset that is pending)" if gpu.pending else ""
            return (f"MIG mode is off on GPU {gpu.index} ({gpu.name}){pending}; turning it on needs a GPU reset, "
                    f"which spotfleet never does (nvidia-smi -i {gpu.index} -mig 1)")  # fmt: skip
        if gpu.layout == want:
            return None
        have = layout_text(gpu.layout) if gpu.devices else "no MIG devices"
        if not order.reconfigure:
            return (f"GPU {gpu.index} has {have}, the pool declares {layout_text(want)}, and "
                    f"gpu_partitioning.mig_reconfigure is off")  # fmt: skip
        mine = {d.uuid for d in self.allocated.values()}
        if any(d.busy or d.uuid in mine for d in gpu.devices):
            return f"GPU {gpu.index} has {have} with jobs on it; the declared {layout_text(want)} waits for them"
        return None

    def _reconfigure(
        self, nvml: ModuleType, gpu: GpuMig, want: tuple[str, ...], events: list[AgentEvent]
    ) -> str | None:
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
        profiles = _profile_ids(nvml, handle)
        missing = [p for p in want if p not in profiles]
        if missing:
            return f"GPU {gpu.index} ({gpu.name}) offers no {', '.join(sorted(set(missing)))} profile"
        try:
            for d in gpu.devices:
                dev = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, d.index)
                gi = nvml.nvmlDeviceGetGpuInstanceById(handle, nvml.nvmlDeviceGetGpuInstanceId(dev))
                ci = nvml.nvmlGpuInstanceGetComputeInstanceById(gi, nvml.nvmlDeviceGetComputeInstanceId(dev))
                nvml.nvmlComputeInstanceDestroy(ci)
                nvml.nvmlGpuInstanceDestroy(gi)
            for profile in want:  # largest first: small instances must not fragment the room big ones need
                profile_id, slices = profiles[profile]
                gi = nvml.nvmlDeviceCreateGpuInstance(handle, profile_id)
                ci_const = getattr(nvml, f"NVML_COMPUTE_INSTANCE_PROFILE_{slices}_SLICE")
                ci_info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, ci_const, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
                nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
        except nvml.NVMLError as exc:
            return f"creating MIG layout {layout_text(want)} on GPU {gpu.index} failed: {type(exc).__name__}: {exc}"
        before = layout_text(gpu.layout) if gpu.devices else "no MIG devices"
        events.append(AgentEvent(kind="node.mig_reconfigured", at=self._now(),
                                 message=f"GPU {gpu.index} ({gpu.name}): MIG layout {before} → {layout_text(want)}",
                                 data={"gpu": gpu.index, "layout": list(want)}))  # fmt: skip
        log.info("GPU %s: MIG layout %s → %s", gpu.index, before, layout_text(want))
        return None

    # ------------------------------------------------------------ hand out

    def allocate(self, key: Key, gpu_index: int, profile: str) -> MigDevice | str:
        """A free MIG device of ``profile`` on GPU ``gpu_index`` for ``key``, or why not."""
        if key in self.allocated:
            return self.allocated[key]
        reason = self.unfit.get(profile) or self.unfit.get(ALL)
        if reason is not None:
            return reason
        nvml = self._nvml()
        if nvml is None:
            self.unfit[ALL] = "no NVIDIA driver (NVML unavailable): MIG devices cannot be read"
            return self.unfit[ALL]
        gpu = next((g for g in self.gpus() if g.index == gpu_index), None)
        if gpu is None:
            return f"GPU {gpu_index} does not exist here"
        structural = self._unfit_gpu(gpu, gpu.layout, MigOrder(layout=list(gpu.layout)))
        if structural is not None:
            self.unfit[ALL] = structural
            return structural
        taken = {d.uuid for d in self.allocated.values()}
        mine = [d for d in gpu.devices if d.profile == profile]
        if not mine:
            self.unfit[profile] = f"GPU {gpu_index} has no {profile} MIG device ({layout_text(gpu.layout) or 'none'})"
            return self.unfit[profile]
        free = [d for d in mine if d.uuid not in taken and not d.busy]
        if not free:
            return f"every {profile} MIG device of GPU {gpu_index} is in use"
        self.allocated[key] = free[0]
        return free[0]

    def release(self, key: Key) -> None:
        self.allocated.pop(key, None)

    def report(self) -> dict[str, Any]:
        """For the heartbeat (``partitions.mig``): the declared layout, what is
        handed out, and what cannot be had here."""
        return {
            "layout": list(self.order.layout) if self.order else None,
            "allocated": {f"{k[0]}/{k[1]}/{k[2]}": d.uuid for k, d in sorted(self.allocated.items())},
            "unfit": dict(self.unfit),
        }


def _profile_table(nvml: ModuleType, handle: Any) -> dict[str, tuple[int, int]]:
    """MIG profile name → (profile id, slices), as this GPU's driver names them."""
    out: dict[str, tuple[int, int]] = {}
    for const in range(int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, const)
        except nvml.NVMLError:
            continue
        name = (_text(getattr(info, "name", b"")) or "").strip().lower().removeprefix("mig ").strip()
        if name in MIG_PROFILES:
            out.setdefault(name, (int(info.id), int(info.sliceCount)))
    return out


def _profile_ids(nvml: ModuleType, handle: Any) -> dict[str, tuple[int, int]]:
    return _profile_table(nvml, handle)


def _profile_names(nvml: ModuleType, handle: Any) -> dict[int, str]:
    return {pid: name for name, (pid, _slices) in _profile_table(nvml, handle).items()}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value)
