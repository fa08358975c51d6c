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
from typing import Any, Literal

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


_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_TEXT = 64 * 1024  # one string of a spec (a command, an env value)


def _no_controls(value: str, *, allow: str = "") -> str:
    """Refuse NUL and other control characters (``allow``: e.g. tab and newline)."""
    for ch in value:
        if (ord(ch) < 32 or ord(ch) == 127) and ch not in allow:
            raise ValueError(f"control character {ch!r} is not allowed here")
    if len(value) > MAX_TEXT:
        raise ValueError(f"at most {MAX_TEXT} characters")
    return value


class StrictModel(BaseModel):
    # allow_inf_nan=False: Infinity/NaN are refused in every float (a 500 and a stored job before)
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """No NUL anywhere in a spec (PostgreSQL refuses it in text: a 500 before)."""
        for text in _strings(value):
            if "\x00" in text:
                raise ValueError("NUL characters are not allowed")
        return value


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
    gpu_memory_gib: float = Field(0, ge=0, le=10_000, description="minimum memory per GPU")
    mig: str | None = Field(None, description="a MIG profile such as 1g.10gb instead of whole GPUs")
    gpu_fraction: float | None = Field(None, gt=0, lt=1, description="a share of one GPU")
    nodes: int = Field(1, ge=1, le=256, description="nodes for a gang (multi-node) job")
    cpus: float = Field(0, ge=0, le=100_000, description="minimum vCPUs per node")
    memory_gib: float = Field(0, ge=0, le=1_000_000, description="minimum memory per node")
    nvlink: bool = Field(False, description="multi-GPU nodes must have NVLink")
    interconnect: Literal["tcp", "gpudirect-tcpx", "efa"] | None = Field(
        None, description="the fabric between a gang's nodes (efa: AWS EFA; gpudirect-tcpx: GCP A3)"
    )

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
    size_gib: float = Field(
        0, ge=0, le=1e7, description="checkpoint size: resuming in another region or cloud moves it (egress)"
    )
    duration: Duration | None = Field(
        None,
        description="how long the job takes to save a checkpoint once asked; longer than a cloud's reclaim "
        "notice (AWS 120s, GCP 30s), a reclaim there loses the work since the last periodic checkpoint, and "
        "deadline jobs keep that in reserve (default: unknown, assumed to fit)",
    )

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, value: str) -> str:
        import signal as _signal

        name = value.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        if name not in _signal.Signals.__members__ or name in ("SIGKILL", "SIGSTOP"):
            # SIG_DFL/SIG_IGN are attributes of the module, not signals; KILL and STOP cannot be caught
            raise ValueError(f"{value!r} is not a signal a job can catch; use e.g. SIGUSR1, SIGUSR2 or SIGTERM")
        return name


class Dataset(StrictModel):
    """Where the job's input lives: running elsewhere costs egress."""

    region: str = Field(..., description="region holding the data, e.g. us-east-1")
    size_gib: float = Field(0, ge=0, le=1e9, description="how much is read per attempt")


class JobSpec(StrictModel):
    """A GPU job as a user submits it."""

    name: str = Field(..., description="lowercase letters, digits, '.', '_' and '-'")
    tenant: str = Field("default", description="who pays: budgets and cost reports group by tenant")
    family: str | None = Field(None, description="groups runs of the same job for forecasts; defaults to name")
    command: list[str] | str = Field(..., description="argv list, or a shell command string")
    image: str | None = Field(
        None,
        description="container image to run the command in (docker or podman on the node; a node without "
        "either fails the attempt rather than run the job outside it)",
    )
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    workdir: str | None = Field(None, description="working directory on the node (default: the agent's job folder)")
    resources: Resources = Field(default_factory=Resources)
    priority: Priority = Field(
        Priority.NORMAL,
        description="critical: on-demand, never preempted; normal: cheapest that meets the deadline; "
        "opportunistic: spot only, preemptible",
    )
    interruptible: bool | None = Field(None, description="defaults to true unless priority is critical")
    deadline: datetime | None = Field(None, description="ISO-8601 with a timezone, e.g. 2026-12-03T18:00:00Z")
    expected_duration: Duration | None = Field(None, description="how long the work takes (deadline planning)")
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    max_price_per_hour: float | None = Field(
        None, gt=0, le=100_000, description="never pay more per instance-hour (USD)"
    )
    regions: list[str] = Field(default_factory=list, description="allowed regions (default: any)")
    providers: list[str] = Field(default_factory=list, description="allowed providers, e.g. [aws] (default: any)")
    dataset: Dataset | None = Field(None, description="where the input data lives")
    labels: dict[str, str] = Field(default_factory=dict, description="free-form labels, kept with the job")
    max_retries: int = Field(3, ge=0, le=100, description="restarts after failures (not interruptions)")
    throughput: float | None = Field(None, gt=0, le=1e12, description="override: useful work per GPU-hour")

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
        if isinstance(value, list) and len(value) > 4096:
            raise ValueError("at most 4096 arguments")
        for part in [value] if isinstance(value, str) else value:
            _no_controls(part, allow="\t\n\r")
        return value

    @field_validator("tenant")
    @classmethod
    def _valid_tenant(cls, value: str) -> str:
        if not _TENANT.match(value):
            raise ValueError("use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        return value

    @field_validator("family", "image", "workdir")
    @classmethod
    def _plain_text(cls, value: str | None) -> str | None:
        return _no_controls(value) if value is not None else None

    @field_validator("env")
    @classmethod
    def _valid_env(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 1024:
            raise ValueError("at most 1024 variables")
        for key, text in value.items():
            if not _ENV_NAME.match(key):
                raise ValueError(f"{key!r} is not a variable name (letters, digits, '_'; not starting with a digit)")
            _no_controls(text, allow="\t\n")
        return value

    @field_validator("labels")
    @classmethod
    def _valid_labels(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 256:
            raise ValueError("at most 256 labels")
        for key, text in value.items():
            _no_controls(key)
            _no_controls(text)
            if len(key) > 256 or len(text) > 4096:
                raise ValueError("a label key is at most 256 characters, a value 4096")
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
            interconnect=r.interconnect,
        )


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _strings(v)]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_strings(k), *_strings(v))]
    return []


def check_submission(spec: JobSpec, *, now: datetime, known_gpus: set[str] | frozenset[str]) -> None:
    """What a spec must also meet to be accepted *now* (the API's submit): a
    deadline still ahead, GPU types some provider or the catalogue knows.
    Not part of validation, so specs in files (simulations, old records) still load."""
    if spec.deadline is not None and spec.deadline <= now:
        raise InvalidSpec("deadline", f"the deadline {spec.deadline.isoformat()} is in the past (now "
                          f"{now.isoformat(timespec='seconds')})")  # fmt: skip
    known = {g.upper() for g in known_gpus}
    for gpu in spec.resources.gpu_types:
        if gpu.upper() not in known:
            raise InvalidSpec(
                "resources.gpu_types", f"unknown GPU type {gpu!r}; known: {', '.join(sorted(known_gpus))}"
            )


SPEC_DOCS = "docs/reference.md#job-spec"


def format_validation_error(
    error: ValidationError,
    *,
    prefix: str = "",
    model: type[BaseModel] | None = None,
    docs: str = SPEC_DOCS,
    source: str | None = None,
) -> InvalidSpec:
    """Every pydantic error as one line naming its field, e.g.
    ``resources.gpus: Input should be greater than or equal to 0 (got -1)``.

    An unknown key gets a "did you mean" from the names ``model`` allows at
    that place, and a pointer to the reference (``docs``)."""
    issues: list[tuple[str, str]] = []
    for item in error.errors():
        parts = tuple(item.get("loc", ()))
        loc = ".".join(f"{p}" for p in parts)
        if prefix:
            loc = f"{prefix}.{loc}" if loc else prefix
        kind = item.get("type", "")
        msg = str(item.get("msg", "invalid"))
        if kind == "extra_forbidden":
            msg = _unknown_field(model, parts, docs)
        elif kind == "missing":
            msg = "required field is missing"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        got = item.get("input")
        secret = bool(parts) and str(parts[-1]) in ("token", "password")  # never echo a secret
        if (
            kind not in ("missing", "extra_forbidden")
            and got is not None
            and not isinstance(got, dict | list)
            and not secret
        ):
            msg = f"{msg} (got {got!r})"
        if (loc, msg) not in issues:
            issues.append((loc, msg))
    field, message = issues[0] if issues else ("", "invalid")
    return InvalidSpec(field, message, source=source, issues=issues or None)


def _unknown_field(model: type[BaseModel] | None, loc: tuple[Any, ...], docs: str) -> str:
    import difflib

    known = allowed_keys(model, loc[:-1]) if model is not None and loc else []
    guess = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6) if known else []
    hint = f"did you mean {guess[0]!r}? " if guess else ""
    return f"unknown field; {hint}see {docs} for the valid keys"


def allowed_keys(model: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The field names (and aliases) a nested model accepts at ``path``."""
    current: Any = model
    for part in path:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = _model_in(fields[part].annotation)
        if current is None:
            return []
    fields = getattr(current, "model_fields", {})
    names = list(fields)
    names += [f.alias for f in fields.values() if f.alias]
    return names


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X``, ``X | None``, ``list[X]``)."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def parse_spec(data: Any, *, source: str | None = None) -> JobSpec:
    """Validate a mapping as a ``JobSpec``; ``InvalidSpec`` names the field."""
    if not isinstance(data, dict):
        raise InvalidSpec("", "a job spec must be a YAML mapping (name: ..., command: ...)", source=source)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise format_validation_error(exc, model=JobSpec, source=source) from None


def load_specs(text: str, *, source: str | None = None) -> list[JobSpec]:
    """Parse YAML holding one spec, a list of specs, or several documents."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except RecursionError:  # a 3,000-line traceback before
        raise InvalidSpec("", "the YAML is nested too deeply", source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidSpec("", f"malformed YAML: {where}{problem}", source=source) from None
    items = [item for doc in docs for item in (doc if isinstance(doc, list) else [doc])]
    specs: list[JobSpec] = []
    issues: list[tuple[str, str]] = []
    for index, item in enumerate(items):
        try:
            specs.append(parse_spec(item))
        except InvalidSpec as exc:  # keep going: report every spec's problems at once
            where = f"spec {index + 1} ({item.get('name', '?')})" if len(items) > 1 and isinstance(item, dict) else ""
            issues.extend((f"{where}: {f}" if where and f else where or f, m) for f, m in exc.issues)
    if issues:
        raise InvalidSpec(issues[0][0], issues[0][1], source=source, issues=issues)
    if not specs:
        raise InvalidSpec("", "no job spec found (the file is empty)", source=source)
    return specs
