"""The ledger's plain records, shared by the code that loads them (SQL, in
``usage.py``/``load.py``) and the code that prices them (``report.py``), so the
report never imports the module that queries the database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class AttemptUsage:
    job_id: str
    attempt: int
    node_rank: int
    resume_step: int | None
    first_progress_at: datetime | None
    last_step: int | None
    checkpoint_step: int | None
    gpu_samples: int
    mean_utilization_pct: float | None
    idle_fraction: float
    peak_gpu_memory_mib: float
    gpu_memory_total_mib: float
    isolation: str | None = None  # mig | mps | time-sliced | whole, as the agent applied it
    isolation_note: str | None = None
    given_share: float | None = None  # of one GPU
    mean_used_share: float | None = None  # SM time used, mean over samples
    memory_limit_mib: float | None = None

    @property
    def isolation_phrase(self) -> str:
        from spotfleet.model.partition import isolation_phrase

        return isolation_phrase(self.isolation)


@dataclass(slots=True)
class UsageCounters:
    """One ``attempt_usage`` row as the heartbeat fold sees it: running counters
    the store loads and saves around a pure ``fold`` (``ledger/usage.py``)."""

    instance_id: str
    updated_at: datetime
    resume_step: int | None = None
    first_step: int | None = None
    first_progress_at: datetime | None = None
    last_step: int | None = None
    last_progress_at: datetime | None = None
    checkpoint_step: int | None = None
    checkpoint_at: datetime | None = None
    gpu_samples: int = 0
    gpu_util_sum: float = 0.0
    gpu_idle_samples: int = 0
    peak_gpu_memory_mib: float = 0.0
    gpu_memory_total_mib: float = 0.0
    isolation: str | None = None
    isolation_note: str | None = None
    given_share: float | None = None
    share_samples: int = 0
    used_share_sum: float = 0.0
    memory_limit_mib: float | None = None


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """Paid time of one instance at one price, as stored (``billing_segments``)."""

    instance_id: str
    provider: str
    region: str
    zone: str
    instance_type: str
    market: str
    gpu_count: int
    price_per_hour: float
    on_demand_price_per_hour: float
    start: datetime
    end: datetime | None
    resource_id: str = ""  # the cloud's instance id, when known


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One node of one job attempt, as stored (``job_attempts``), with its job's facts."""

    job_id: str
    attempt: int
    node_rank: int
    instance_id: str
    gpus: int
    mig_slices: int
    gpu_share: float | None
    bound_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str | None
    tenant: str
    family: str
    job_name: str
