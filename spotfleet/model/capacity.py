"""Who uses which GPU on which instance — shared by policies and plan validation.

A whole-GPU binding owns its GPU indices; MIG bindings share a GPU up to its 7
compute slices; fractional bindings share a GPU up to 1.0. One GPU is used in
one mode at a time. ``Usage`` is rebuilt from the jobs in a snapshot, so it can never
drift from the bindings it describes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from spotfleet.model.instance import Instance
from spotfleet.model.job import ACTIVE_JOB_STATES, Binding, Job

MIG_SLICES_PER_GPU = 7


@dataclass(slots=True)
class InstanceUsage:
    whole: set[int] = field(default_factory=set)  # GPU indices owned by one job
    slices: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # GPU index -> MIG slices used
    fractions: dict[int, float] = field(default_factory=lambda: defaultdict(float))  # GPU index -> share used
    jobs: set[str] = field(default_factory=set)

    def free_whole(self, gpu_count: int) -> list[int]:
        return [
            g for g in range(gpu_count) if g not in self.whole and not self.slices.get(g) and not self.fractions.get(g)
        ]

    def add(self, job_id: str, binding: Binding) -> None:
        self.jobs.add(job_id)
        if binding.mig_slices:
            for g in binding.gpu_indices:
                self.slices[g] += binding.mig_slices
        elif binding.gpu_fraction:
            for g in binding.gpu_indices:
                self.fractions[g] += binding.gpu_fraction
        else:
            self.whole.update(binding.gpu_indices)


class Usage:
    """GPU usage per instance, from the active jobs' bindings."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self._by_instance: dict[str, InstanceUsage] = defaultdict(InstanceUsage)
        for job in jobs:
            if job.state in ACTIVE_JOB_STATES:
                for b in job.bindings:
                    self._by_instance[b.instance_id].add(job.id, b)

    def of(self, instance_id: str) -> InstanceUsage:
        return self._by_instance[instance_id]

    def add(self, job_id: str, bindings: Iterable[Binding]) -> None:
        for b in bindings:
            self._by_instance[b.instance_id].add(job_id, b)

    def free_gpus(self, instance: Instance) -> list[int]:
        return self.of(instance.id).free_whole(instance.gpu_count)

    def jobs_on(self, instance_id: str) -> set[str]:
        return self._by_instance[instance_id].jobs if instance_id in self._by_instance else set()

    def conflict(self, instance: Instance, binding: Binding) -> str | None:
        """Why ``binding`` does not fit on ``instance`` now; ``None`` if it does."""
        usage = self.of(instance.id)
        for g in binding.gpu_indices:
            if g < 0 or g >= instance.gpu_count:
                return f"GPU {g} does not exist on {instance.id} ({instance.gpu_count} GPUs)"
            if binding.mig_slices:
                if g in usage.whole or usage.fractions.get(g):
                    return f"GPU {g} on {instance.id} is used whole or shared by fractions"
                if usage.slices.get(g, 0) + binding.mig_slices > MIG_SLICES_PER_GPU:
                    return f"GPU {g} on {instance.id} has no {binding.mig_slices} free MIG slices"
            elif binding.gpu_fraction:
                if g in usage.whole or usage.slices.get(g):
                    return f"GPU {g} on {instance.id} is used whole or by MIG"
                if usage.fractions.get(g, 0.0) + binding.gpu_fraction > 1.0 + 1e-9:
                    return f"GPU {g} on {instance.id} has less than {binding.gpu_fraction:g} of a GPU free"
            elif g in usage.whole or usage.slices.get(g) or usage.fractions.get(g):
                return f"GPU {g} on {instance.id} is already in use"
        return None
