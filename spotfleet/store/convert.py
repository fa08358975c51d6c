"""Rows ↔ domain objects. Policies and the controller never see ORM rows."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import Row

from spotfleet.model.events import NoticeKind
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Binding, Checkpoint, Job, JobState
from spotfleet.model.offering import Market, Offering
from spotfleet.model.spec import JobSpec
from spotfleet.model.statemachine import TransitionRecord
from spotfleet.store.schema import InstanceRow, JobRow


def offering_to_dict(o: Offering) -> dict[str, Any]:
    return {
        "provider": o.provider, "region": o.region, "zone": o.zone, "instance_type": o.instance_type,
        "gpu": o.gpu, "gpu_count": o.gpu_count, "gpu_memory_gib": o.gpu_memory_gib, "vcpus": o.vcpus,
        "memory_gib": o.memory_gib, "market": o.market.value, "price_per_hour": o.price_per_hour,
        "on_demand_price_per_hour": o.on_demand_price_per_hour, "price_source": o.price_source,
        "nvlink": o.nvlink, "interconnect": o.interconnect,
    }  # fmt: skip


def offering_from_dict(d: dict[str, Any]) -> Offering:
    return Offering(
        provider=d["provider"], region=d["region"], zone=d["zone"], instance_type=d["instance_type"],
        gpu=d["gpu"], gpu_count=int(d["gpu_count"]), gpu_memory_gib=float(d["gpu_memory_gib"]),
        vcpus=float(d["vcpus"]), memory_gib=float(d["memory_gib"]), market=Market(d["market"]),
        price_per_hour=float(d["price_per_hour"]),
        on_demand_price_per_hour=float(d["on_demand_price_per_hour"]),
        price_source=d.get("price_source", "catalog"), nvlink=bool(d.get("nvlink", False)),
        interconnect=str(d.get("interconnect", "tcp")),
    )  # fmt: skip


def job_from_row(row: JobRow | Row[Any], *, spec: JobSpec | None = None) -> Job:
    """``row``: an ORM row, or a Core row of the same columns. ``spec``: the row's
    spec already parsed (the store caches live jobs' specs)."""
    return Job(
        id=row.id,
        spec=spec if spec is not None else JobSpec.model_validate(row.spec),
        state=JobState(row.state),
        created_at=row.created_at,
        state_since=row.state_since,
        attempt=row.attempt,
        failures=row.failures,
        interruptions=row.interruptions,
        bindings=tuple(Binding.from_dict(b) for b in row.bindings or ()),
        checkpoint=Checkpoint.from_dict(row.checkpoint) if row.checkpoint else None,
        progress=dict(row.progress or {}),
        cancel_requested=row.cancel_requested,
        exit_code=row.exit_code,
        message=row.message,
        drain_deadline=row.drain_deadline,
        history=[TransitionRecord.from_dict(h) for h in row.history or ()],
        version=row.version,
    )


def job_lifecycle_values(job: Job) -> dict[str, Any]:
    """The reconciler-owned columns of a job (never ``cancel_requested``)."""
    return {
        "state": job.state.value,
        "state_since": job.state_since,
        "finished_at": job.state_since if job.terminal else None,
        "attempt": job.attempt,
        "failures": job.failures,
        "interruptions": job.interruptions,
        "bindings": [b.to_dict() for b in job.bindings],
        "checkpoint": job.checkpoint.to_dict() if job.checkpoint else None,
        "progress": job.progress,
        "exit_code": job.exit_code,
        "message": job.message,
        "drain_deadline": job.drain_deadline,
        "history": [h.to_dict() for h in job.history],
        "version": job.version + 1,
    }


def job_to_row(job: Job) -> JobRow:
    return JobRow(
        id=job.id,
        name=job.spec.name,
        tenant=job.spec.tenant,
        family=job.spec.job_family,
        priority=job.spec.priority.value,
        spec=job.spec.model_dump(mode="json", exclude_none=True),
        created_at=job.created_at,
        cancel_requested=job.cancel_requested,
        **job_lifecycle_values(job),
    )


def instance_from_row(row: InstanceRow | Row[Any]) -> Instance:
    """``row``: an ORM row, or a Core row of the same columns."""
    return Instance(
        id=row.id,
        offering=offering_from_dict(row.offering),
        request_id=row.request_id,
        state=InstanceState(row.state),
        created_at=row.created_at,
        state_since=row.state_since,
        provider_id=row.provider_id,
        launched_at=row.launched_at,
        terminated_at=row.terminated_at,
        idle_since=row.idle_since,
        address=row.address,
        cordoned=row.cordoned,
        reserved_for=row.reserved_for,
        notice_kind=NoticeKind(row.notice_kind) if row.notice_kind else None,
        notice_deadline=row.notice_deadline,
        launch_attempts=row.launch_attempts,
        message=row.message,
        history=[TransitionRecord.from_dict(h) for h in row.history or ()],
        version=row.version,
    )


def instance_lifecycle_values(inst: Instance) -> dict[str, Any]:
    return {
        "provider_id": inst.provider_id,
        "offering": offering_to_dict(inst.offering),
        "price_per_hour": inst.offering.price_per_hour,
        "state": inst.state.value,
        "state_since": inst.state_since,
        "launched_at": inst.launched_at,
        "terminated_at": inst.terminated_at,
        "idle_since": inst.idle_since,
        "address": inst.address,
        "cordoned": inst.cordoned,
        "reserved_for": inst.reserved_for,
        "notice_kind": inst.notice_kind.value if inst.notice_kind else None,
        "notice_deadline": inst.notice_deadline,
        "launch_attempts": inst.launch_attempts,
        "message": inst.message,
        "history": [h.to_dict() for h in inst.history],
        "version": inst.version + 1,
    }


def instance_to_row(inst: Instance, *, agent_token_hash: str) -> InstanceRow:
    return InstanceRow(
        id=inst.id,
        provider=inst.offering.provider,
        request_id=inst.request_id,
        market=inst.offering.market.value,
        instance_type=inst.offering.instance_type,
        region=inst.offering.region,
        zone=inst.offering.zone,
        created_at=inst.created_at,
        agent_token_hash=agent_token_hash,
        **instance_lifecycle_values(inst),
    )


def copy_job(job: Job) -> Job:
    """A copy the caller may mutate without touching ``job`` (the store keeps the
    live jobs it converted and hands out copies): the mutable containers are new,
    the rest is immutable (``Binding``, ``TransitionRecord``, ``JobSpec``) or replaced
    whole, never changed in place."""
    ckpt = job.checkpoint
    return Job(
        job.id, job.spec, job.state, job.created_at, job.state_since, job.attempt, job.failures, job.interruptions,
        job.bindings, replace(ckpt) if ckpt is not None else None,
        dict(job.progress), job.cancel_requested, job.exit_code, job.message, job.drain_deadline, list(job.history),
        job.version,
    )  # fmt: skip


def copy_instance(inst: Instance) -> Instance:
    """A copy the caller may mutate (see ``copy_job``; ``Offering`` is frozen)."""
    return Instance(
        inst.id, inst.offering, inst.request_id, inst.state, inst.created_at, inst.state_since, inst.provider_id,
        inst.launched_at, inst.terminated_at, inst.idle_since, inst.launch_attempts, inst.address, inst.cordoned,
        inst.reserved_for, inst.notice_kind, inst.notice_deadline, inst.message, list(inst.history), inst.version,
    )  # fmt: skip
