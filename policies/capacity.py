"""Capacity: what room each instance has, and the unavailable-pool cache.

``Cap`` is the planner's view of one instance: free whole GPUs by index,
partly used GPUs (MIG slices or time-sliced fractions), free vCPUs and memory.
It is built from the snapshot's bindings and updated as the plan binds jobs,
so a job is never bound to an instance without room for it.

MIG packing: a MIG-capable GPU (A100/H100/H200) in MIG mode holds profiles
whose compute slices sum to at most 7 and whose memory sums to at most the
GPU's memory; a GPU is whole, MIG or time-sliced, never two at once. Where
the pool declares a MIG layout (``Offering.mig_layout``, from the
``gpu_partitioning`` config), a GPU holds exactly the layout's devices: a job
takes a free device of its profile, so what the planner packs is what the
node agent can hand out. An instance type agents reported MIG-unfit
(``Offering.mig_unfit``) takes no MIG job.

Unavailable cache: after ``InsufficientCapacity`` the executor marks each
failed offering's pool (key = provider:market:type:zone) unavailable until
``now + ttl`` (``mark_unavailable``); ``Snapshot.usable_offerings`` and the
selection index skip it until then, so the same step's re-plan tries the
next-best offering. The spot→on-demand fallback is not done here: a re-plan
offers on-demand only to jobs whose market decision allows it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from spotfleet.model.job import Binding, Job
from spotfleet.model.offering import Offering
from spotfleet.model.spec import MIG_PROFILES
from spotfleet.policies.shape import MIG_SLICES_PER_GPU, Shape, ShareKind, mig_memory_gib

EPS = 1e-9


def mark_unavailable(
    unavailable: dict[str, datetime], offerings: Iterable[Offering], *, now: datetime, ttl_s: float
) -> dict[str, datetime]:
    """A new cache with ``offerings``' pools unavailable until now + ttl
    (expired entries dropped)."""
    until = now + timedelta(seconds=ttl_s)
    out = {k: v for k, v in unavailable.items() if v > now}
    for o in offerings:
        out[o.key] = max(until, out.get(o.key, until))
    return out


@dataclass(slots=True)
class Slot:
    """A partly used GPU."""

    mode: ShareKind
    slices: int = 0
    memory_gib: float = 0.0
    fraction: float = 0.0
    profiles: list[str] = field(default_factory=list)  # MIG profiles held (matched against a declared layout)


class Cap:
    """Room left on one instance during a plan."""

    __slots__ = (
        "cpus",
        "drainable",
        "free",
        "id",
        "jobs",
        "memory",
        "new",
        "offering",
        "pool",
        "reserved_for",
        "schedulable",
        "slots",
        "tenant",
        "touched",
    )

    def __init__(self, instance_id: str, offering: Offering, *, schedulable: bool = True, new: bool = False) -> None:
        self.id = instance_id
        self.offering = offering
        self.pool = offering.key
        self.free: list[int] = list(range(offering.gpu_count))
        self.slots: dict[int, Slot] = {}
        self.cpus = offering.vcpus
        self.memory = offering.memory_gib
        self.jobs: list[Job] = []
        self.schedulable = schedulable
        self.new = new
        self.tenant: str | None = None  # who a new instance was bought for
        self.touched = False  # bound or reserved in this plan
        self.reserved_for: str | None = None  # replacement held for this job (Instance.reserved_for)
        self.drainable = False  # PROVISIONING or RUNNING: a Drain may be applied

    # ---------------------------------------------------------- queries
    @property
    def zone(self) -> str:
        return self.offering.zone

    @property
    def used_gpus(self) -> float:
        n = self.offering.gpu_count
        partial = sum(
            s.slices / MIG_SLICES_PER_GPU if s.mode is ShareKind.MIG else s.fraction for s in self.slots.values()
        )
        return n - len(self.free) - len(self.slots) + partial

    def _partial(self, shape: Shape) -> int | None:
        """Index of the fullest partly used GPU that still takes ``shape``."""
        best: int | None = None
        best_used = -1.0
        for idx, s in self.slots.items():
            if s.mode is not shape.kind:
                continue
            if shape.kind is ShareKind.MIG and self.offering.mig_layout:
                layout = self.offering.mig_layout
                if s.profiles.count(shape.mig_profile) >= layout.count(shape.mig_profile):
                    continue
                used = float(s.slices)
            elif shape.kind is ShareKind.MIG:
                if s.slices + shape.slices > MIG_SLICES_PER_GPU:
                    continue
                if s.memory_gib + shape.mig_memory_gib > self.offering.gpu_memory_gib + EPS:
                    continue
                used = float(s.slices)
            else:
                if s.fraction + shape.fraction > 1.0 + EPS:
                    continue
                used = s.fraction
            if used > best_used:
                best, best_used = idx, used
        return best

    def fits(self, shape: Shape) -> bool:
        req = shape.req
        if self.cpus + EPS < req.cpus or self.memory + EPS < req.memory_gib:
            return False
        if self.offering.mig_layout and shape.kind is not ShareKind.MIG and req.gpus > 0:
            return False  # the GPUs are cut into MIG devices
        if shape.kind is ShareKind.WHOLE:
            return len(self.free) >= req.gpus
        if shape.kind is ShareKind.MIG and not self._mig_ok(shape):
            return False
        return bool(self.free) or self._partial(shape) is not None

    def _mig_ok(self, shape: Shape) -> bool:
        """The declared layout has the profile, and no agent said it cannot be had here."""
        o = self.offering
        if o.mig_layout and shape.mig_profile not in o.mig_layout:
            return False
        return o.mig_unfit_reason(shape.mig_profile) is None

    def key(self, shape: Shape) -> tuple[int, int, float, float, str]:
        """Best-fit order: fewest free GPUs, then least GPU memory, then host memory."""
        partial = 0 if shape.kind is not ShareKind.WHOLE and self._partial(shape) is not None else 1
        return (partial, len(self.free), self.offering.gpu_memory_gib, self.memory, self.id)

    @property
    def exhausted(self) -> bool:
        if self.free:
            return False
        for s in self.slots.values():
            layout = self.offering.mig_layout
            if s.mode is ShareKind.MIG and (len(s.profiles) < len(layout) if layout else s.slices < MIG_SLICES_PER_GPU):
                return False
            if s.mode is ShareKind.FRACTION and s.fraction < 1.0 - EPS:
                return False
        return True

    # ---------------------------------------------------------- changes
    def take(self, shape: Shape, rank: int = 0) -> Binding:
        """Reserve room for one node of ``shape``; the caller checked ``fits``."""
        self.cpus -= shape.req.cpus
        self.memory -= shape.req.memory_gib
        self.touched = True
        if shape.kind is ShareKind.WHOLE:
            k = shape.req.gpus
            taken, self.free = self.free[:k], self.free[k:]
            return Binding(rank, self.id, tuple(taken))
        idx = self._partial(shape)
        if idx is None:
            idx = self.free.pop(0)
            self.slots[idx] = Slot(shape.kind)
        slot = self.slots[idx]
        if shape.kind is ShareKind.MIG:
            slot.slices += shape.slices
            slot.memory_gib += shape.mig_memory_gib
            slot.profiles.append(shape.mig_profile)
            return Binding(rank, self.id, (idx,), mig_slices=shape.slices)
        slot.fraction += shape.fraction
        return Binding(rank, self.id, (idx,), gpu_fraction=shape.fraction)

    def occupy(self, job: Job, binding: Binding) -> None:
        """Account for a node of ``job`` already bound here (from the snapshot)."""
        r = job.spec.resources
        self.cpus -= r.cpus
        self.memory -= r.memory_gib
        if job not in self.jobs:
            self.jobs.append(job)
        if r.mig or r.gpu_fraction:
            kind = ShareKind.MIG if r.mig else ShareKind.FRACTION
            idx = binding.gpu_indices[0] if binding.gpu_indices else None
            slot = self.slots.get(idx) if idx is not None else None
            if slot is None:
                if idx is not None and idx in self.free:
                    self.free.remove(idx)
                elif self.free:
                    idx = self.free.pop(0)
                else:
                    return  # inconsistent snapshot: nothing left to mark
                slot = self.slots[idx] = Slot(kind)
            if r.mig:
                slot.slices += binding.mig_slices or MIG_PROFILES[r.mig]
                slot.memory_gib += mig_memory_gib(r.mig)
                slot.profiles.append(r.mig)
            else:
                slot.fraction += r.gpu_fraction or 0.0
            return
        indices = list(binding.gpu_indices)
        if not indices:
            indices = self.free[: r.gpus]
        for idx in indices:
            if idx in self.free:
                self.free.remove(idx)

    def release(self, job: Job, binding: Binding) -> None:
        """Undo ``occupy`` (preemption and consolidation simulations)."""
        r = job.spec.resources
        self.cpus += r.cpus
        self.memory += r.memory_gib
        if job in self.jobs:
            self.jobs.remove(job)
        if r.mig or r.gpu_fraction:
            idx = binding.gpu_indices[0] if binding.gpu_indices else next(iter(self.slots), None)
            slot = self.slots.get(idx) if idx is not None else None
            if slot is None or idx is None:
                return
            if r.mig:
                slot.slices -= binding.mig_slices or MIG_PROFILES[r.mig]
                slot.memory_gib -= mig_memory_gib(r.mig)
                if r.mig in slot.profiles:
                    slot.profiles.remove(r.mig)
                empty = slot.slices <= 0
            else:
                slot.fraction -= r.gpu_fraction or 0.0
                empty = slot.fraction <= EPS
            if empty:
                del self.slots[idx]
                self.free = sorted([*self.free, idx])
            return
        for idx in binding.gpu_indices:
            if idx not in self.free and idx not in self.slots and idx < self.offering.gpu_count:
                self.free.append(idx)
        self.free.sort()

    def clone(self) -> Cap:
        c = Cap.__new__(Cap)
        c.id, c.offering, c.pool, c.schedulable, c.new = self.id, self.offering, self.pool, self.schedulable, self.new
        c.free = list(self.free)
        c.slots = {i: Slot(s.mode, s.slices, s.memory_gib, s.fraction, list(s.profiles)) for i, s in self.slots.items()}
        c.cpus, c.memory, c.jobs, c.tenant, c.touched = (
            self.cpus,
            self.memory,
            list(self.jobs),
            self.tenant,
            self.touched,
        )
        c.reserved_for, c.drainable = self.reserved_for, self.drainable
        return c
