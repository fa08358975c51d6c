"""GPU partitions: declared MIG layouts and how a job's share is isolated.

A *MIG layout* is what one GPU of a pool is cut into, written the way people
say it: ``7x1g.5gb`` (seven 1g.5gb devices), ``3g.20gb+2x2g.10gb``. The
planner packs MIG jobs against the declared layout (a 2g.10gb job never lands
on a GPU cut into 1g slices); the node agent makes the GPU match it, or says
why it cannot (``docs/gpu-partitioning.md``).

*Isolation* is what a job's share actually got on the node, as the agent
reports it: a MIG device (hardware-isolated memory and SMs), an MPS share
(thread and pinned-memory limits), time-sliced (shared, not isolated), or
whole GPUs. ``explain``, ``spotfleet job`` and the ledger print
``isolation_phrase`` so a bill never claims an isolation the job did not get.

Pure data: no I/O, importable by policies, the controller and the agent.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from spotfleet.model.spec import MIG_PROFILES

MIG_SLICES_PER_GPU = 7
Layout = tuple[str, ...]  # one MIG profile per device of one GPU, largest first

MIG = "mig"  # a MIG device of its own
MPS = "mps"  # an MPS client with thread and pinned-memory limits
TIME_SLICED = "time-sliced"  # a fraction with no MPS: the GPU's scheduler shares it
WHOLE = "whole"  # whole GPUs (nothing shared)
SHARED_NOT_ISOLATED = "shared, not isolated"

_PHRASES = {
    MIG: "isolated: its own MIG device (memory and SMs in hardware)",
    MPS: "MPS share: compute and memory capped, one GPU context shared",
    TIME_SLICED: SHARED_NOT_ISOLATED,
    WHOLE: "whole GPUs",
}
_TERM = re.compile(r"^(?:(\d+)\s*[x×*]\s*)?([0-9a-z.]+)$")


def isolation_phrase(kind: str | None) -> str:
    """What an isolation kind means, in the words explain and the ledger print."""
    if kind is None:
        return "not reported yet"
    return _PHRASES.get(kind, kind)


def parse_mig_layout(text: str) -> Layout:
    """``"7x1g.5gb"`` or ``"3g.20gb+2x2g.10gb"`` → profiles, largest first.

    Raises ``ValueError`` naming the bad term: an unknown profile, a zero
    count, or more than the GPU's 7 compute slices in all.
    """
    profiles: list[str] = []
    for raw in text.lower().replace(",", "+").split("+"):
        term = raw.strip()
        m = _TERM.match(term)
        if not term or m is None:
            raise ValueError(f"cannot read MIG layout term {raw.strip()!r}; write e.g. 7x1g.5gb or 3g.20gb+2x2g.10gb")
        count = int(m.group(1)) if m.group(1) else 1
        profile = m.group(2)
        if profile not in MIG_PROFILES:
            raise ValueError(f"unknown MIG profile {profile!r}; use one of {', '.join(sorted(MIG_PROFILES))}")
        if count < 1:
            raise ValueError(f"{term!r}: the count must be at least 1")
        profiles.extend([profile] * count)
    slices = sum(MIG_PROFILES[p] for p in profiles)
    if slices > MIG_SLICES_PER_GPU:
        raise ValueError(f"layout {text!r} needs {slices} compute slices; a GPU has {MIG_SLICES_PER_GPU}")
    return sort_layout(profiles)


def sort_layout(profiles: list[str] | tuple[str, ...]) -> Layout:
    """Largest profile first (the order instances are created in, so big ones find room)."""
    return tuple(sorted(profiles, key=lambda p: (-MIG_PROFILES[p], -mig_memory_gib(p), p)))


def layout_text(layout: Layout) -> str:
    """The canonical spelling: ``1x3g.20gb+2x2g.10gb``."""
    counts = Counter(layout)
    return "+".join(f"{counts[p]}x{p}" for p in dict.fromkeys(layout))


def mig_memory_gib(profile: str) -> float:
    """Memory of a MIG profile from its name: ``3g.40gb`` → 40."""
    return float(profile.split(".", 1)[1].removesuffix("gb"))


def layout_memory_gib(layout: Layout) -> float:
    return sum(mig_memory_gib(p) for p in layout)


@dataclass(frozen=True, slots=True)
class PartitionPolicy:
    """The ``gpu_partitioning`` config as the controller and planner read it.

    ``mig_layouts`` keys are instance types or GPU models, lower case; an
    instance type wins over its GPU model. ``mig_reconfigure`` lets agents
    create the declared GPU/compute instances through NVML when a GPU's
    layout differs (MIG mode itself is never changed: that needs a GPU reset).
    ``mps``: run fractional jobs under MPS (else time-sliced). A job over its
    GPU memory share is warned about, then stopped when ``memory_over`` is
    ``stop`` after ``memory_grace_samples`` consecutive samples over.
    """

    mig_layouts: Mapping[str, Layout] = field(default_factory=dict)
    mig_reconfigure: bool = False
    mps: bool = True
    memory_over: Literal["warn", "stop"] = "stop"
    memory_grace_samples: int = 3

    def layout_for(self, instance_type: str, gpu: str) -> Layout | None:
        if not self.mig_layouts:
            return None
        found = self.mig_layouts.get(instance_type.lower())
        return found if found is not None else self.mig_layouts.get(gpu.lower())


DEFAULT_PARTITIONS = PartitionPolicy()


def mig_unfit_of(info: Mapping[str, object] | None) -> tuple[tuple[str, str], ...]:
    """(profile or ``*``, reason) pairs from an agent's presence info
    (``{"partitions": {"mig": {"unfit": {profile: reason}}}}``); () when fit or unknown."""
    parts = info.get("partitions") if isinstance(info, Mapping) else None
    mig = parts.get("mig") if isinstance(parts, Mapping) else None
    unfit = mig.get("unfit") if isinstance(mig, Mapping) else None
    if not isinstance(unfit, Mapping):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in unfit.items()))
