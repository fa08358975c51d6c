"""How much useful training work one GPU of each type does per hour.

Selection ranks offerings by *cost per unit of useful work*, so it needs a speed
for every GPU model. The table below is the documented default; a job can
override it (``spec.throughput``) and the forecaster replaces it with what a job
family was observed to do (``Forecast.throughput``).

Design choice: the default relative speed of a GPU is the geometric mean of its
dense BF16/FP16 tensor throughput and its memory bandwidth, each relative to the
A100-SXM4-80GB (= 1.0). Training steps are partly compute-bound (GEMMs) and
partly bandwidth-bound (optimizer, norms, attention at small batch), and the
geometric mean tracks published MLPerf Training ratios better than either
number alone: for H100 vs A100 it gives 2.28, against 1.4× (3D-UNet), 1.8×
(ResNet-50) and 2.0× (DLRM) measured on like-for-like Dell submissions in MLPerf
Training v3.0 (June 2023) and ~2.5–3× NVIDIA reports on GPT-3 175B in the same
round; peak TFLOP/s alone (3.17×) overstates it. The unit is "A100-80GB-hours of
work", so a ranking reads as dollars per A100-hour-equivalent.

Sources (datasheet figures, dense — no structured sparsity):

- A100: NVIDIA A100 Tensor Core GPU datasheet (2021): 312 TFLOP/s BF16;
  1,555 GB/s (40 GB SXM4) / 2,039 GB/s (80 GB SXM4).
- H100: NVIDIA H100 datasheet (SXM5): 989 TFLOP/s BF16, 3,350 GB/s.
- H200: NVIDIA H200 datasheet (SXM): 989 TFLOP/s BF16, 4,800 GB/s.
- B200 / B300: NVIDIA HGX B200 / Blackwell Ultra product pages: 2,250 TFLOP/s
  dense BF16 per GPU, 8,000 GB/s (B300 BF16 figure approximate).
- L40S: NVIDIA L40S datasheet: 362 TFLOP/s BF16, 864 GB/s.
- L4: NVIDIA L4 datasheet: 121 TFLOP/s BF16, 300 GB/s.
- A10G: AWS does not publish it; the A10 datasheet gives 125 TFLOP/s BF16 and
  600 GB/s, and the g5's A10G runs at lower clocks (≈70 TFLOP/s, approximate).
- T4 / T4g: NVIDIA T4 datasheet: 65 TFLOP/s FP16, 320 GB/s.
- V100: NVIDIA V100 datasheet (SXM2): 125 TFLOP/s FP16 tensor, 900 GB/s.
- RTX PRO 6000 Blackwell Server: NVIDIA product page, ≈500 TFLOP/s dense BF16
  (approximate), 1,792 GB/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """Published figures for one GPU model (per GPU)."""

    tflops_bf16: float  # dense BF16/FP16 tensor TFLOP/s
    bandwidth_gbs: float  # HBM/GDDR bandwidth, GB/s
    mig: bool = False  # supports MIG (7 compute slices)


REFERENCE = GpuSpec(312.0, 2039.0, mig=True)  # A100-SXM4-80GB

GPU_SPECS: dict[str, GpuSpec] = {
    "A100": GpuSpec(312.0, 1555.0, mig=True),
    "A100-80GB": GpuSpec(312.0, 2039.0, mig=True),
    "H100": GpuSpec(989.0, 3350.0, mig=True),
    "H200": GpuSpec(989.0, 4800.0, mig=True),
    "B200": GpuSpec(2250.0, 8000.0),
    "B300": GpuSpec(2250.0, 8000.0),
    "L40S": GpuSpec(362.0, 864.0),
    "L4": GpuSpec(121.0, 300.0),
    "A10G": GpuSpec(70.0, 600.0),
    "T4": GpuSpec(65.0, 320.0),
    "T4G": GpuSpec(65.0, 320.0),
    "V100": GpuSpec(125.0, 900.0),
    "V100-32GB": GpuSpec(125.0, 900.0),
    "RTX PRO SERVER 6000": GpuSpec(500.0, 1792.0),
}

UNKNOWN_GPU_THROUGHPUT = 0.1
"""Speed assumed for a GPU missing from the table: slow, so it is never picked
by accident over a known one; a learned figure replaces it."""

MIG_GPUS = frozenset(name for name, spec in GPU_SPECS.items() if spec.mig)


def relative_speed(spec: GpuSpec) -> float:
    """Geometric mean of compute and bandwidth ratios to the A100-80GB."""
    return math.sqrt((spec.tflops_bf16 / REFERENCE.tflops_bf16) * (spec.bandwidth_gbs / REFERENCE.bandwidth_gbs))


DEFAULT_THROUGHPUT: dict[str, float] = {name: relative_speed(spec) for name, spec in GPU_SPECS.items()}


def table_throughput(gpu: str) -> float:
    """Default work per GPU-hour (A100-80GB-hours) for a GPU model name."""
    return DEFAULT_THROUGHPUT.get(gpu.upper(), UNKNOWN_GPU_THROUGHPUT)


def is_mig_capable(gpu: str) -> bool:
    return gpu.upper() in MIG_GPUS


def scaled_throughput(gpu: str, learned: dict[str, float]) -> float:
    """Work per GPU-hour for ``gpu`` in the unit of ``learned`` observations.

    ``learned`` maps GPU model → observed work per GPU-hour for one job family
    (in the job's own unit, e.g. samples). A GPU that was observed uses its
    figure; one that was not is the table figure times the mean ratio
    learned/table over the observed GPUs, so every offering is ranked in the
    same unit. With nothing learned this is the table.
    """
    key = gpu.upper()
    if key in learned:
        return learned[key]
    if not learned:
        return table_throughput(gpu)
    ratios = [value / table_throughput(name) for name, value in learned.items()]
    return table_throughput(gpu) * (sum(ratios) / len(ratios))


# Multi-node scaling by inter-node fabric (docs/policies.md, "Interconnect").
#
# Design choice: a gang of ``n`` nodes does ``n · e(fabric)^log2(n)`` nodes'
# worth of work: every doubling of the gang keeps a fraction ``e`` of the
# per-node throughput (the all-reduce crosses one more level of the network).
# One node (NVLink/NVSwitch inside the box, already in the per-GPU table) is 1.0.
# ``efa`` is fitted to a published measurement (p4d, 400 Gbps EFA: 4 nodes
# 3.9×, 16 nodes 14.4× one node → 0.987 and 0.974 per doubling); ``gpudirect-tcpx``
# and ``tcp`` are ESTIMATES from published bandwidth ratios (TCPX/TCPXO vs
# plain-TCP NCCL bus bandwidth), see docs/policies.md.
SCALING_PER_DOUBLING: dict[str, float] = {
    "efa": 0.975,
    "gpudirect-tcpx": 0.95,
    "tcp": 0.75,
}
UNKNOWN_FABRIC_SCALING = SCALING_PER_DOUBLING["tcp"]

_scaling_cache: dict[tuple[str, int], float] = {}


def scaling_efficiency(interconnect: str, nodes: int) -> float:
    """Fraction of linear speed-up a gang of ``nodes`` keeps on ``interconnect``."""
    key = (interconnect, nodes)
    found = _scaling_cache.get(key)
    if found is None:
        if nodes <= 1:
            found = 1.0
        else:
            per = SCALING_PER_DOUBLING.get(interconnect, UNKNOWN_FABRIC_SCALING)
            found = per ** math.log2(nodes)
        _scaling_cache[key] = found
    return found
