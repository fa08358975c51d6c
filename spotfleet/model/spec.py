"""The job spec users write (YAML), validated by pydantic.

Every model forbids unknown fields: a typo such as ``gpu: 2`` instead of
``gpus: 2`` is an error naming the field, never silently ignored. ``load_spec``
turns YAML text into a ``JobSpec`` or raises ``InvalidSpec`` with a one-line
message naming the field and the fix.
"""

from __future__ import annotations

import enum
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spotfleet.errors import InvalidSpec
from spotfleet.model.durations import Duration
from spotfleet.model.offering import NodeRequirements

_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")


class Priority(enum.StrEnum):
    """How much a job matters; decides the market and who may preempt whom."""

    CRITICAL = "critical"  # on-demand, never preempted
    NORMAL = "normal"  # cheapest that meets the deadline; may use spot
    OPPORTUNISTIC = "opportunistic"  # spot only, waits for cheap capacity, preemptible

    @property
    def rank(self) -> int:
        return {"critical": 2, "normal": 1, "opportunistic": 0}[self.value]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


MIG_PROFILES: dict[str, int] = {
    # profile -> compute slices out of 7 (A100/H100/H200)
    "1g.5gb": 1, "1g.10gb": 1, "1g.12gb": 1, "1g.18gb": 1, "1g.20gb": 1, "1g.24gb": 1,
    "2g.10gb": 2, "2g.20gb": 2, "2g.24gb": 2, "2g.35gb": 2,
    "3g.20gb": 3, "3g.40gb": 3, "3g.47gb": 3, "3g.71gb": 3,
    "4g.20gb": 4, "4g.40gb": 4, "4g.47gb": 4, "4g.71gb": 4,
    "7g.40gb": 7, "7g.80gb": 7, "7g.141gb": 7,
}  # fmt: skip


class Resources(StrictModel):
    """What each node of the job needs."""

    gpus: int = Field(1, ge=0, le=16, description="GPUs per node (0 for CPU-only)")
    gpu_types: list[str] = Field(default_factory=list, description="acceptable GPU models, e.g. [H100, A100]")
    gpu_memory_gib: float = Field(0, ge=0, description="minimum memory per GPU")
    mig: str | None = Field(None, description="a MIG profile such as 1g.10gb instead of whole GPUs")
    gpu_fraction: float | None = Field(None, gt=0, lt=1, description="a share of one GPU")
    nodes: int = Field(1, ge=1, le=256, description="nodes for a gang (multi-node) job")
    cpus: float = Field(0, ge=0)
    memory_gib: float = Field(0, ge=0)
    nvlink: bool = Field(False, description="multi-GPU nodes must have NVLink")

    @field_validator("mig")
    @classmethod
    def _known_mig(cls, value: str | None) -> str | None:
        if value is not None and value not in MIG_PROFILES:
            raise ValueError(f"unknown MIG profile {value!r}; use one of {', '.join(sorted(MIG_PROFILES))}")
        return value

    @model_validator(mode="after")
    def _one_kind_of_share(self) -> Resources:
        if (self.mig or self.gpu_fraction) and self.gpus not in (0, 1):
            raise ValueError("mig and gpu_fraction ask for part of one GPU: leave gpus at 1")
        if self.mig and self.gpu_fraction:
            raise ValueError("give either mig or gpu_fraction, not both")
        return self


class CheckpointSpec(StrictModel):
    """How the job checkpoints (see README: Making your job preemption-safe)."""

    interval: Duration | None = Field(None, description="ask for a checkpoint this often")
    signal: str = Field("SIGUSR1", description="signal sent to the job's process group to checkpoint")
    grace: Duration = Field(timedelta(seconds=10), description="margin before a reclaim to escalate to SIGTERM")

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, value: str) -> str:
        import signal as _signal

        name = value.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        if not hasattr(_signal, name):
            raise ValueError(f"unknown signal {value!r}; use e.g. SIGUSR1, SIGUSR2 or SIGTERM")
        return name


class Dataset(StrictModel):
    region: str
    size_gib: float = Field(0, ge=0)


class JobSpec(StrictModel):
    """A GPU job as a user submits it."""

    name: str = Field(..., description="lowercase letters, digits, '.', '_' and '-'")
    tenant: str = "default"
    family: str | None = Field(None, description="groups runs of the same job for forecasts; defaults to name")
    command: list[str] | str = Field(..., description="argv list, or a shell command string")
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    resources: Resources = Field(default_factory=Resources)
    priority: Priority = Priority.NORMAL
    interruptible: bool | None = Field(None, description="defaults to true unless priority is critical")
    deadline: datetime | None = Field(None, description="ISO-8601 with a timezone, e.g. 2026-12-03T18:00:00Z")
    expected_duration: Duration | None = None
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    max_price_per_hour: float | None = Field(None, gt=0)
    regions: list[str] = Field(default_factory=list)
    providers: list[str] = Field(default_factory=list)
    dataset: Dataset | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    max_retries: int = Field(3, ge=0, le=100, description="restarts after failures (not interruptions)")
    throughput: float | None = Field(None, gt=0, description="override: useful work per GPU-hour")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                "use 1-63 lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit"
            )
        return value

    @field_validator("command")
    @classmethod
    def _non_empty_command(cls, value: list[str] | str) -> list[str] | str:
        if (isinstance(value, str) and not value.strip()) or (isinstance(value, list) and not value):
            raise ValueError("give the command to run, e.g. 'python train.py' or [python, train.py]")
        return value

    @field_validator("deadline")
    @classmethod
    def _aware_deadline(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("give the deadline with a timezone, e.g. 2026-12-03T18:00:00Z")
        return value.astimezone(UTC) if value is not None else None

    @property
    def is_interruptible(self) -> bool:
        if self.interruptible is not None:
            return self.interruptible
        return self.priority is not Priority.CRITICAL

    @property
    def job_family(self) -> str:
        return self.family or self.name

    @property
    def gpus_per_node(self) -> int:
        return self.resources.gpus

    @property
    def total_gpus(self) -> int:
        return self.resources.gpus * self.resources.nodes

    def node_requirements(self) -> NodeRequirements:
        r = self.resources
        return NodeRequirements(
            gpus=r.gpus,
            gpu_types=frozenset(r.gpu_types),
            gpu_memory_gib=r.gpu_memory_gib,
            cpus=r.cpus,
            memory_gib=r.memory_gib,
            regions=frozenset(self.regions),
            providers=frozenset(self.providers),
            max_price_per_hour=self.max_price_per_hour,
            nvlink=r.nvlink,
        )


def format_validation_error(error: ValidationError, *, prefix: str = "") -> InvalidSpec:
    """The first pydantic error as one line naming the field, e.g.
    ``resources.gpus: must be >= 0 (got -1)``."""
    first = error.errors()[0]
    loc = ".".join(f"{p}" for p in first.get("loc", ()))
    if prefix:
        loc = f"{prefix}.{loc}" if loc else prefix
    kind = first.get("type", "")
    msg = str(first.get("msg", "invalid"))
    if kind == "extra_forbidden":
        msg = "unknown field; check the spelling (see examples/ for valid specs)"
    elif kind == "missing":
        msg = "required field is missing"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    got = first.get("input")
    if kind not in ("missing", "extra_forbidden") and got is not None and not isinstance(got, dict | list):
        msg = f"{msg} (got {got!r})"
    return InvalidSpec(loc, msg)


def parse_spec(data: Any, *, source: str | None = None) -> JobSpec:
    """Validate a mapping as a ``JobSpec``; ``InvalidSpec`` names the field."""
    if not isinstance(data, dict):
        raise InvalidSpec("", "a job spec must be a YAML mapping (name: ..., command: ...)", source=source)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        err = format_validation_error(exc)
        raise InvalidSpec(err.field, err.message, source=source) from None


def load_specs(text: str, *, source: str | None = None) -> list[JobSpec]:
    """Parse YAML holding one spec, a list of specs, or several documents."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidSpec("", f"malformed YAML: {where}{problem}", source=source) from None
    specs: list[JobSpec] = []
    for doc in docs:
        items = doc if isinstance(doc, list) else [doc]
        for item in items:
            specs.append(parse_spec(item, source=source))
    if not specs:
        raise InvalidSpec("", "no job spec found (the file is empty)", source=source)
    return specs
