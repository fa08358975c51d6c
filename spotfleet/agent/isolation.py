"""What a job node gets of its GPUs, and how it is isolated — decided once, at start.

``GpuShares.grant(key, assignment)`` turns the controller's ``Partition``
into the job's GPU environment:

- no partition: whole GPUs, ``CUDA_VISIBLE_DEVICES=<indices>``;
- ``mig``: a MIG device of its profile from ``partitions.MigNode``
  (``CUDA_VISIBLE_DEVICES=MIG-<uuid>``), or a *refusal* with the reason when
  none can be had here — the job is not started and the controller requeues it;
- ``fraction``: an MPS client of its GPU's daemon (``mps.MpsDaemons``) with
  thread and pinned-memory limits; where MPS is off or unavailable, the GPU
  time-sliced, reported as such ("shared, not isolated").

The grant also carries what telemetry and enforcement need: the isolation
kind, the share given (of one GPU) and the memory limit. ``annotate`` adds
those, and the share of SM time used, to each job in a telemetry sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from spotfleet.agent.mps import MpsDaemon, MpsDaemons, client_env
from spotfleet.agent.partitions import Key, MigDevice, MigNode
from spotfleet.model.partition import MIG, MIG_SLICES_PER_GPU, MPS, TIME_SLICED, WHOLE
from spotfleet.model.spec import MIG_PROFILES
from spotfleet.wire import AgentEvent, Assignment, MigOrder


@dataclass(frozen=True, slots=True)
class GpuGrant:
    env: dict[str, str]
    isolation: str | None  # mig | mps | time-sliced | whole; None: no GPU
    note: str | None = None  # why it is less isolated than asked
    given_share: float | None = None  # of one GPU (whole GPUs: their count)
    memory_limit_mib: float | None = None  # enforced for fractions (enforce.py)
    gpu_index: int | None = None
    on_memory_over: str = "warn"
    grace_samples: int = 3


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str


@dataclass
class GpuShares:
    mig: MigNode
    mps: MpsDaemons
    nvml: Callable[[], ModuleType | None]  # GpuTelemetry.nvml
    _mps_users: dict[Key, int] = field(default_factory=dict)  # key -> GPU index of its MPS daemon

    def apply(self, order: MigOrder | None) -> list[AgentEvent]:
        """The controller's MIG order for this instance (see ``partitions.MigNode.apply``)."""
        return self.mig.apply(order)

    def grant(self, key: Key, a: Assignment) -> GpuGrant | Refusal:
        p = a.partition
        indices = list(a.gpu_indices)
        if p is None or not indices:
            return GpuGrant({"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in indices)},
                            WHOLE if indices else None, given_share=float(len(indices)) if indices else None)  # fmt: skip
        gpu = indices[0]
        if p.kind == "mig" and p.mig_profile:
            dev = self.mig.allocate(key, gpu, p.mig_profile)
            if not isinstance(dev, MigDevice):
                return Refusal(f"no {p.mig_profile} MIG device for it: {dev}")
            return GpuGrant({"CUDA_VISIBLE_DEVICES": dev.uuid}, MIG,
                            given_share=MIG_PROFILES[p.mig_profile] / MIG_SLICES_PER_GPU,
                            memory_limit_mib=dev.memory_mib or p.memory_limit_mib, gpu_index=gpu)  # fmt: skip
        fraction = p.fraction or 0.0

        def shared(env: dict[str, str], isolation: str, note: str | None = None) -> GpuGrant:
            return GpuGrant(env, isolation, note, given_share=fraction, memory_limit_mib=p.memory_limit_mib,
                            gpu_index=gpu, on_memory_over=p.on_memory_over, grace_samples=p.grace_samples)  # fmt: skip

        sliced = {"CUDA_VISIBLE_DEVICES": str(gpu)}
        if not p.mps:
            return shared(sliced, TIME_SLICED, "MPS is off (gpu_partitioning.mps: false)")
        daemon = self.mps.ensure(gpu, self._gpu_uuid(gpu) or str(gpu))
        if not isinstance(daemon, MpsDaemon):
            return shared(sliced, TIME_SLICED, f"MPS unavailable: {daemon}")
        self._mps_users[key] = gpu
        return shared(client_env(daemon, fraction=fraction, memory_limit_mib=p.memory_limit_mib), MPS)

    def release(self, key: Key) -> None:
        """The job node is gone: free its MIG device; the last MPS client of a GPU stops its daemon."""
        self.mig.release(key)
        gpu = self._mps_users.pop(key, None)
        if gpu is not None and gpu not in self._mps_users.values():
            self.mps.stop(gpu)

    def _gpu_uuid(self, index: int) -> str | None:
        nvml = self.nvml()
        if nvml is None:
            return None
        try:
            value = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index))
        except nvml.NVMLError:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)

    def report(self) -> dict[str, Any]:
        return {"mig": self.mig.report(), "mps": self.mps.report()}


def annotate(sample: dict[str, Any], grants: Mapping[Key, GpuGrant]) -> None:
    """Add isolation, share given, share used (SM time ÷ 100) and memory limit to each job of a sample."""
    for job in sample.get("jobs", []):
        key: Key = (str(job.get("job_id")), int(job.get("attempt") or 0), int(job.get("node_rank") or 0))
        grant = grants.get(key)
        if grant is None:
            continue
        sm = job.get("sm_util_pct")
        job.update({
            "isolation": grant.isolation, "given_share": grant.given_share,
            "used_share": round(float(sm) / 100, 4) if isinstance(sm, int | float) else None,
            "memory_limit_mib": grant.memory_limit_mib,
        })  # fmt: skip
