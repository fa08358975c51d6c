"""JSON views of domain objects (what the API returns and the CLI prints)."""

from __future__ import annotations

from typing import Any

from spotfleet.ledger.types import AttemptUsage
from spotfleet.model.instance import Instance
from spotfleet.model.job import Job


def job_view(job: Job, *, detail: bool = False) -> dict[str, Any]:
    spec = job.spec
    out: dict[str, Any] = {
        "id": job.id,
        "name": spec.name,
        "tenant": spec.tenant,
        "priority": spec.priority.value,
        "state": job.state.value,
        "gpus": spec.resources.gpus,
        "nodes": spec.resources.nodes,
        "attempt": job.attempt,
        "interruptions": job.interruptions,
        "failures": job.failures,
        "instances": list(job.instance_ids),
        "created_at": job.created_at.isoformat(),
        "state_since": job.state_since.isoformat(),
        "deadline": spec.deadline.isoformat() if spec.deadline else None,
        "message": job.message,
        "progress": job.progress,
        "exit_code": job.exit_code,
        "cancel_requested": job.cancel_requested,
    }
    if detail:
        out["spec"] = spec.model_dump(mode="json", exclude_none=True)
        out["bindings"] = [b.to_dict() for b in job.bindings]
        out["checkpoint"] = job.checkpoint.to_dict() if job.checkpoint else None
        out["history"] = [h.to_dict() for h in job.history]
    return out


def instance_view(inst: Instance, *, detail: bool = False) -> dict[str, Any]:
    o = inst.offering
    out: dict[str, Any] = {
        "id": inst.id,
        "provider": o.provider,
        "provider_id": inst.provider_id,
        "instance_type": o.instance_type,
        "gpu": o.gpu,
        "gpus": o.gpu_count,
        "region": o.region,
        "zone": o.zone,
        "market": o.market.value,
        "price_per_hour": o.price_per_hour,
        "on_demand_price_per_hour": o.on_demand_price_per_hour,
        "state": inst.state.value,
        "cordoned": inst.cordoned,
        "notice": inst.notice_kind.value if inst.notice_kind else None,
        "notice_deadline": inst.notice_deadline.isoformat() if inst.notice_deadline else None,
        "created_at": inst.created_at.isoformat(),
        "launched_at": inst.launched_at.isoformat() if inst.launched_at else None,
        "terminated_at": inst.terminated_at.isoformat() if inst.terminated_at else None,
        "message": inst.message,
    }
    if detail:
        out["history"] = [h.to_dict() for h in inst.history]
        out["request_id"] = inst.request_id
    return out


def partition_view(u: AttemptUsage | None) -> dict[str, Any]:
    """How one attempt's GPU share was isolated and used (``spotfleet job`` columns)."""
    return {
        "isolation": u.isolation if u else None,
        "isolation_detail": u.isolation_phrase if u and u.isolation else None,
        "isolation_note": u.isolation_note if u else None,
        "gpu_share_given": u.given_share if u else None,
        "gpu_share_used": round(u.mean_used_share, 4) if u and u.mean_used_share is not None else None,
        "peak_gpu_memory_mib": u.peak_gpu_memory_mib if u and u.gpu_samples else None,
        "gpu_memory_limit_mib": u.memory_limit_mib if u else None,
    }
