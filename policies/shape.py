"""What one node of a job needs, as a hashable value the planner groups by.

Ten thousand pending jobs are usually a few hundred distinct *shapes* (GPUs,
type, memory, MIG profile, market...). Ranking offerings and scanning capacity
once per shape instead of once per job is what keeps ``plan()`` near-linear.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from spotfleet.model.offering import NodeRequirements, Offering
from spotfleet.model.partition import MIG_SLICES_PER_GPU, layout_text, mig_memory_gib
from spotfleet.model.spec import MIG_PROFILES, JobSpec
from spotfleet.policies import throughput
from spotfleet.policies.forecast import Forecast

__all__ = ["MIG_SLICES_PER_GPU", "Shape", "ShareKind", "mig_memory_gib", "shape_of"]


class ShareKind(enum.StrEnum):
    WHOLE = "whole"  # whole GPUs (or none: CPU-only)
    MIG = "mig"  # a MIG profile on one MIG-capable GPU
    FRACTION = "fraction"  # a time-sliced share of one GPU


@dataclass(frozen=True, slots=True)
class Shape:
    """Per-node needs of a job (all nodes of a gang are alike)."""

    req: NodeRequirements
    nodes: int = 1
    kind: ShareKind = ShareKind.WHOLE
    slices: int = 0  # MIG compute slices
    mig_memory_gib: float = 0.0
    fraction: float = 0.0
    mig_profile: str = ""  # the MIG profile's name (layouts are matched by it)

    @property
    def gpus(self) -> int:
        """Whole GPUs per node (0 for MIG/fraction shares and CPU-only jobs)."""
        return self.req.gpus if self.kind is ShareKind.WHOLE else 0

    @property
    def gpu_units(self) -> float:
        """GPUs' worth of work per node: k, slices/7 or the fraction."""
        if self.kind is ShareKind.MIG:
            return self.slices / MIG_SLICES_PER_GPU
        if self.kind is ShareKind.FRACTION:
            return self.fraction
        return float(self.req.gpus)

    @property
    def type_req(self) -> NodeRequirements:
        """``req`` without the where/price parts: what the instance type decides."""
        return replace(self.req, regions=frozenset(), providers=frozenset(), max_price_per_hour=None)

    def rejection(self, offering: Offering) -> str | None:
        """Why ``offering`` cannot host one node (hard constraints), or None."""
        reason = offering.rejection(self.req)
        if reason is not None:
            return reason
        return self.share_rejection(offering)

    def share_rejection(self, offering: Offering) -> str | None:
        """The MIG/fraction part of ``rejection``."""
        if self.kind is ShareKind.MIG:
            if not throughput.is_mig_capable(offering.gpu):
                return f"GPU {offering.gpu} does not support MIG (needs A100/H100/H200)"
            if offering.gpu_memory_gib < self.mig_memory_gib:
                return f"{offering.gpu_memory_gib:g} GiB GPU < MIG profile's {self.mig_memory_gib:g} GiB"
            if offering.mig_layout and self.mig_profile not in offering.mig_layout:
                return f"MIG layout {layout_text(offering.mig_layout)} has no {self.mig_profile} device"
            unfit = offering.mig_unfit_reason(self.mig_profile)
            if unfit is not None:
                return f"MIG unfit: {unfit}"
        if self.kind is not ShareKind.WHOLE and offering.gpu_count < 1:
            return "no GPU"
        if self.kind is not ShareKind.MIG and offering.mig_layout and self.req.gpus > 0:
            return f"GPUs cut into MIG devices ({layout_text(offering.mig_layout)}): no whole GPU or fraction"
        return None

    def per_gpu(self, gpu_memory_gib: float, layout: tuple[str, ...] = ()) -> int:
        """How many nodes of this shape share one GPU (MIG/fraction); a declared
        MIG layout holds as many as it has devices of the profile."""
        if self.kind is ShareKind.MIG and layout:
            return layout.count(self.mig_profile)
        if self.kind is ShareKind.MIG:
            by_slices = MIG_SLICES_PER_GPU // max(self.slices, 1)
            by_memory = int(gpu_memory_gib // self.mig_memory_gib) if self.mig_memory_gib else by_slices
            return max(1, min(by_slices, by_memory))
        if self.kind is ShareKind.FRACTION:
            return max(1, int(1.0 / self.fraction + 1e-9))
        return 1

    def per_instance(self, offering: Offering) -> int:
        """Nodes of this shape one empty instance of ``offering`` holds."""
        if self.kind is not ShareKind.WHOLE:
            by_gpu = offering.gpu_count * self.per_gpu(offering.gpu_memory_gib, offering.mig_layout)
        elif self.req.gpus:
            by_gpu = offering.gpu_count // self.req.gpus
        else:
            by_gpu = 1 << 16
        by_cpu = int(offering.vcpus // self.req.cpus) if self.req.cpus else by_gpu
        by_mem = int(offering.memory_gib // self.req.memory_gib) if self.req.memory_gib else by_gpu
        return max(0, min(by_gpu, by_cpu, by_mem, 1 << 10))


def shape_of(spec: JobSpec, forecast: Forecast) -> Shape:
    """The shape of ``spec``, with forecast peak memory where the spec is silent.

    A family that never used more than 20 GiB gets a 22 GiB requirement (10 %
    headroom), so it may go to a 24 GiB GPU but not a 16 GiB one.
    """
    req = spec.node_requirements()
    r = spec.resources
    if r.gpu_memory_gib == 0 and not r.mig:
        predicted = forecast.memory_requirement_gib(spec.job_family)
        if predicted is not None and r.gpus > 0:
            req = replace(req, gpu_memory_gib=predicted)
    if r.mig:
        # the profile occupies part of one GPU: the node asks for "1 GPU" only in
        # the sense of needing a GPU; memory comes from the profile.
        req = replace(req, gpus=1, gpu_memory_gib=0.0)
        return Shape(req, r.nodes, ShareKind.MIG, slices=MIG_PROFILES[r.mig], mig_memory_gib=mig_memory_gib(r.mig),
                     mig_profile=r.mig)  # fmt: skip
    if r.gpu_fraction:
        req = replace(req, gpus=1)
        return Shape(req, r.nodes, ShareKind.FRACTION, fraction=r.gpu_fraction)
    return Shape(req, r.nodes)
