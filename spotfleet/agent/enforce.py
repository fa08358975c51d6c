"""Holding fractional jobs to their GPU memory share.

Each telemetry sample attributes GPU memory to jobs by process (NVML's
per-process figures, joined to jobs by process group). A job over the memory
its share allows (``Partition.memory_limit_mib``: fraction × the GPU's
memory) gets a warning event the first time; if it stays over for
``grace_samples`` samples in a row and the config says ``stop``, the agent
stops it with a reason that ends up in ``spotfleet job``. A sample back under
the limit resets the count (and a later excess warns again).

Design choice: only per-process figures are used. When the driver hides PIDs
(another PID namespace), a job's memory is its GPUs' total — on a shared GPU
that is everyone's memory, and stopping a job for it would punish the
innocent. MPS's ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` already caps a client's
allocations; this is the check that also covers time-sliced jobs and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from spotfleet.agent.isolation import GpuGrant
from spotfleet.agent.partitions import Key
from spotfleet.wire import AgentEvent


@dataclass(frozen=True, slots=True)
class Stop:
    key: Key
    reason: str


@dataclass
class MemoryGuard:
    now: Callable[[], datetime]
    over: dict[Key, int] = field(default_factory=dict)  # consecutive samples over the limit
    stopped: set[Key] = field(default_factory=set)  # stop already asked for (it may take a sample to exit)

    def check(self, sample: Mapping[str, Any], grants: Mapping[Key, GpuGrant]) -> tuple[list[AgentEvent], list[Stop]]:
        events: list[AgentEvent] = []
        stops: list[Stop] = []
        seen: set[Key] = set()
        for job in sample.get("jobs", []):
            key: Key = (str(job.get("job_id")), int(job.get("attempt") or 0), int(job.get("node_rank") or 0))
            grant = grants.get(key)
            used = job.get("memory_used_mib")
            if (grant is None or grant.memory_limit_mib is None or grant.isolation not in ("mps", "time-sliced")
                    or job.get("memory_source") != "processes" or not isinstance(used, int | float)
                    or key in self.stopped):  # fmt: skip
                continue
            seen.add(key)
            limit = grant.memory_limit_mib
            if used <= limit:
                self.over.pop(key, None)
                continue
            n = self.over[key] = self.over.get(key, 0) + 1
            share = f"{grant.given_share:g} of GPU {grant.gpu_index}" if grant.given_share else f"GPU {grant.gpu_index}"
            what = f"holds {used:.0f} MiB of GPU memory, over its {limit:.0f} MiB share ({share})"
            data = {"memory_used_mib": float(used), "memory_limit_mib": limit, "samples_over": n}
            if n == 1:
                action = (f"stopped after {grant.grace_samples} samples over" if grant.on_memory_over == "stop"
                          else "warning only (gpu_partitioning.memory_over: warn)")  # fmt: skip
                events.append(self._event(key, "job.gpu_memory_over", "warning", f"{key[0]} node {key[2]} {what}; "
                                          f"{action}", data))  # fmt: skip
            if grant.on_memory_over == "stop" and n >= grant.grace_samples:
                reason = f"it {what} for {n} samples in a row; ask for a larger gpu_fraction or use less memory"
                events.append(self._event(key, "job.gpu_memory_stopped", "error", f"{key[0]} node {key[2]} stopped: "
                                          f"{what}", data))  # fmt: skip
                stops.append(Stop(key, reason))
                self.stopped.add(key)
                self.over.pop(key, None)
        for key in list(self.over):
            if key not in seen:
                del self.over[key]
        self.stopped &= {k for k in grants}
        return events, stops

    def _event(self, key: Key, kind: str, level: str, message: str, data: dict[str, Any]) -> AgentEvent:
        return AgentEvent(kind=kind, level=level, message=message, at=self.now(), job_id=key[0], attempt=key[1],
                          node_rank=key[2], data=data)  # fmt: skip
