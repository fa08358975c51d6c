"""The controller's side of GPU partitioning: what the planner sees, what agents are told.

- ``annotate``: before each plan, every offering and instance is given its
  pool's declared MIG layout (``gpu_partitioning.mig_layouts``) and what agents
  reported against its instance type (``mig_unfit``). The planner
  (``policies/capacity.py``, ``policies/shape.py``) then packs against the
  layout and keeps MIG jobs off instance types that cannot provide them;
  ``explain`` shows those reasons as rejected offerings.
- ``partition_for``: the ``Partition`` a job node's assignment carries (MIG
  profile, or fraction with its memory share and MPS/enforcement settings).
- ``mig_order_for``: the layout an instance's agent must make its GPUs match.

Design choice: unfitness is kept per instance *type* (provider, type), not
per instance: what makes a node unable to provide MIG devices — MIG mode
off, a driver without NVML, a layout the agent may not change — comes with
the image and the type, so buying another of the same would fail the same
way. It lasts while an instance that reported it is alive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from spotfleet.model.instance import Instance
from spotfleet.model.job import Binding, Job
from spotfleet.model.offering import Offering, Offerings
from spotfleet.model.partition import PartitionPolicy, layout_memory_gib, layout_text, mig_memory_gib
from spotfleet.model.snapshot import AgentPresence
from spotfleet.wire import MigOrder, Partition

MIB_PER_GIB = 1024
TypeKey = tuple[str, str]  # provider, instance type


def unfit_by_type(
    instances: Iterable[Instance], presence: Mapping[str, AgentPresence]
) -> dict[TypeKey, dict[str, str]]:
    """What live instances' agents said they cannot provide, by instance type."""
    out: dict[TypeKey, dict[str, str]] = {}
    for inst in instances:
        seen = presence.get(inst.id)
        if seen is None or not seen.mig_unfit or not inst.live:
            continue
        bucket = out.setdefault((inst.offering.provider, inst.offering.instance_type), {})
        for profile, reason in seen.mig_unfit:
            bucket.setdefault(profile, f"{reason} (reported by {inst.id})")
    return out


def annotate_offering(o: Offering, policy: PartitionPolicy, unfit: Mapping[TypeKey, Mapping[str, str]]) -> Offering:
    layout = policy.layout_for(o.instance_type, o.gpu) or ()
    reasons = dict(unfit.get((o.provider, o.instance_type), {}))
    if layout and layout_memory_gib(layout) > o.gpu_memory_gib + 0.5:
        reasons.setdefault("*", f"declared layout {layout_text(layout)} needs {layout_memory_gib(layout):g} GiB; "
                                f"a {o.gpu} has {o.gpu_memory_gib:g} GiB")  # fmt: skip
    if not layout and not reasons and not o.mig_layout and not o.mig_unfit:
        return o
    return replace(o, mig_layout=tuple(layout), mig_unfit=tuple(sorted(reasons.items())))


def annotate(
    offerings: Offerings,
    instances: Mapping[str, Instance],
    presence: Mapping[str, AgentPresence],
    policy: PartitionPolicy,
) -> Offerings:
    """Offerings with layouts and unfitness; instances' offerings updated in place."""
    unfit = unfit_by_type(instances.values(), presence)
    if not policy.mig_layouts and not unfit:
        return offerings
    for inst in instances.values():
        inst.offering = annotate_offering(inst.offering, policy, unfit)
    return Offerings(annotate_offering(o, policy, unfit) for o in offerings)


def partition_for(job: Job, binding: Binding, offering: Offering, policy: PartitionPolicy) -> Partition | None:
    """The share of a GPU one node of ``job`` holds on ``offering`` (None: whole GPUs)."""
    r = job.spec.resources
    if r.mig:
        return Partition(kind="mig", mig_profile=r.mig, memory_limit_mib=mig_memory_gib(r.mig) * MIB_PER_GIB)
    fraction = binding.gpu_fraction or r.gpu_fraction
    if fraction:
        limit = round(fraction * offering.gpu_memory_gib * MIB_PER_GIB, 1) if offering.gpu_memory_gib else None
        return Partition(kind="fraction", fraction=fraction, memory_limit_mib=limit, mps=policy.mps,
                         on_memory_over=policy.memory_over, grace_samples=policy.memory_grace_samples)  # fmt: skip
    return None


def mig_order_for(offering: Offering, policy: PartitionPolicy) -> MigOrder | None:
    layout = policy.layout_for(offering.instance_type, offering.gpu)
    if not layout:
        return None
    return MigOrder(layout=list(layout), reconfigure=policy.mig_reconfigure)


def explain_extra(
    job: Job, instances: Iterable[Instance], usage: Mapping[tuple[str, int, int], object]
) -> dict[str, object]:
    """What ``explain`` adds about a job's GPU share: how its attempt is isolated
    (``shared, not isolated`` when it runs time-sliced), and which live instances
    cannot take it and why."""
    from spotfleet.ledger.types import AttemptUsage
    from spotfleet.model.partition import isolation_phrase

    r = job.spec.resources
    out: dict[str, object] = {}
    if not (r.mig or r.gpu_fraction):
        return out
    out["gpu_share"] = f"MIG {r.mig}" if r.mig else f"{r.gpu_fraction:g} of one GPU"
    lines = []
    for (job_id, attempt, rank), u in sorted(usage.items(), key=lambda kv: kv[0]):
        if job_id != job.id or attempt != job.attempt or not isinstance(u, AttemptUsage) or u.isolation is None:
            continue
        note = f" ({u.isolation_note})" if u.isolation_note else ""
        lines.append(f"node {rank}: {isolation_phrase(u.isolation)}{note}")
    if lines:
        out["isolation"] = lines
    if r.mig:
        unfit = []
        for inst in instances:
            reason = inst.offering.mig_unfit_reason(r.mig) if inst.live else None
            if reason is not None:
                unfit.append(f"{inst.id} ({inst.offering.instance_type}): MIG unfit: {reason}")
            elif inst.live and inst.offering.mig_layout and r.mig not in inst.offering.mig_layout:
                unfit.append(f"{inst.id} ({inst.offering.instance_type}): layout {layout_text(inst.offering.mig_layout)}"
                             f" has no {r.mig} device")  # fmt: skip
        if unfit:
            out["not_placed_on"] = unfit
    return out
