"""Small builders for policy tests: offerings, jobs, instances, snapshots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Binding, Checkpoint, Job, JobState
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.model.snapshot import Bind, Budget, Command, Launch, Snapshot, sequential_ids
from spotfleet.model.spec import JobSpec

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def offering(
    instance_type: str = "p5.48xlarge",
    gpu: str = "H100",
    gpus: int = 1,
    price: float = 1.0,
    *,
    market: Market = Market.ON_DEMAND,
    provider: str = "aws",
    region: str = "us-east-1",
    zone: str = "use1-az1",
    gpu_memory_gib: float = 80.0,
    vcpus: float = 96.0,
    memory_gib: float = 1024.0,
    nvlink: bool = False,
    on_demand: float | None = None,
    interconnect: str = "tcp",
) -> Offering:
    return Offering(
        provider=provider, region=region, zone=zone, instance_type=instance_type, gpu=gpu, gpu_count=gpus,
        gpu_memory_gib=gpu_memory_gib, vcpus=vcpus, memory_gib=memory_gib, market=market, price_per_hour=price,
        on_demand_price_per_hour=on_demand if on_demand is not None else price, nvlink=nvlink,
        interconnect=interconnect,
    )  # fmt: skip


def spec(name: str = "train", **fields: Any) -> JobSpec:
    data: dict[str, Any] = {"name": name, "command": "python train.py", **fields}
    return JobSpec.model_validate(data)


def job(
    job_id: str,
    *,
    state: JobState = JobState.PENDING,
    created: datetime = T0,
    since: datetime | None = None,
    bindings: tuple[Binding, ...] = (),
    checkpoint_at: datetime | None = None,
    attempt: int = 1,
    progress: dict[str, Any] | None = None,
    **spec_fields: Any,
) -> Job:
    j = Job(job_id, spec(job_id.replace("_", "-"), **spec_fields), state, created, since or created,
            attempt=attempt, bindings=bindings, progress=progress or {})  # fmt: skip
    if checkpoint_at is not None:
        j.checkpoint = Checkpoint("s3://ckpt", 1, checkpoint_at, attempt)
    return j


def instance(
    instance_id: str,
    o: Offering,
    *,
    state: InstanceState = InstanceState.RUNNING,
    since: datetime = T0 - timedelta(hours=1),
    idle_since: datetime | None = None,
) -> Instance:
    inst = Instance(instance_id, o, f"req-{instance_id}", state, since, since)
    inst.idle_since = idle_since
    return inst


def running(job_id: str, inst: Instance, gpus: tuple[int, ...], *, mig_slices: int = 0, **kw: Any) -> Job:
    kw.setdefault("state", JobState.RUNNING)
    kw.setdefault("since", T0 - timedelta(minutes=30))
    return job(job_id, bindings=(Binding(0, inst.id, gpus, mig_slices=mig_slices),), **kw)


def snapshot(
    *,
    jobs: list[Job] = (),  # type: ignore[assignment]
    instances: list[Instance] = (),  # type: ignore[assignment]
    offerings: list[Offering] = (),  # type: ignore[assignment]
    budgets: tuple[Budget, ...] = (),
    now: datetime = T0,
    **extra: Any,
) -> Snapshot:
    return Snapshot(
        now=now, jobs={j.id: j for j in jobs}, instances={i.id: i for i in instances},
        offerings=Offerings(offerings), budgets=budgets, new_id=sequential_ids(), **extra,
    )  # fmt: skip


def of_type(commands: list[Command], kind: type) -> list[Any]:
    return [c for c in commands if isinstance(c, kind)]


def launches(commands: list[Command]) -> list[Launch]:
    return of_type(commands, Launch)


def binds(commands: list[Command]) -> dict[str, Bind]:
    return {b.job_id: b for b in of_type(commands, Bind)}
