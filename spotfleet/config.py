"""Controller configuration: one YAML file, validated by pydantic.

Every section forbids unknown keys, so a typo is an error naming the key. Paths
may use ``~``. Environment variables override the file: ``SPOTFLEET_DATABASE``,
``SPOTFLEET_API_TOKEN``, ``SPOTFLEET_DATA_DIR``.
"""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spotfleet.errors import InvalidSpec
from spotfleet.model.durations import Duration
from spotfleet.model.partition import PartitionPolicy, parse_mig_layout
from spotfleet.model.spec import format_validation_error

CONFIG_DOCS = "docs/reference.md#config"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ApiConfig(Section):
    """The HTTP API users and agents talk to."""

    host: str = Field("127.0.0.1", description="address the API listens on; off loopback it needs a token")
    port: int = Field(8478, ge=0, le=65535, description="0 picks a free port")
    token: str | None = Field(None, description="bearer token users must send; required off loopback")
    advertise_url: str | None = Field(None, description="URL node agents use to reach the controller")
    max_body_bytes: int = Field(1024 * 1024, ge=1024, le=1024**3, description="largest request body accepted (413)")
    workers: int = Field(
        0, ge=0, le=64,
        description="API worker processes in front of the step process (PostgreSQL only); 0: one process serves both",
    )  # fmt: skip

    @field_validator("token")
    @classmethod
    def _real_token(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from spotfleet.api.principal import check_token_text
        from spotfleet.errors import InvalidSpec as _Invalid

        try:
            return check_token_text(value)
        except _Invalid as exc:
            raise ValueError(exc.message) from None

    @model_validator(mode="after")
    def _token_off_loopback(self) -> ApiConfig:
        if not is_loopback(self.host) and not self.token:
            raise ValueError(
                f"refusing to listen on {self.host} without an API token: set api.token "
                "(or SPOTFLEET_API_TOKEN), or bind 127.0.0.1"
            )
        return self


class ReconcileConfig(Section):
    interval: Duration = Field(timedelta(seconds=5), description="a step also runs at once on submissions and reports")
    idle_ttl: Duration = Field(timedelta(minutes=5), description="an empty instance is given back after this")
    agent_timeout: Duration = Field(timedelta(minutes=2), description="no heartbeat this long: the instance is lost")
    boot_timeout: Duration = Field(timedelta(minutes=15), description="launched but the agent never registered")
    heartbeat: Duration = Field(timedelta(seconds=2), description="how often agents report")
    offerings_ttl: Duration = Field(timedelta(minutes=10), description="how often offerings and prices refresh")


class HaConfig(Section):
    """Replicated controllers (PostgreSQL): one leader at a time holds a lease."""

    lease_ttl: Duration = Field(
        timedelta(seconds=10), description="a leader that stops renewing is replaced after this"
    )
    renew_every: Duration = Field(timedelta(seconds=2), description="how often replicas renew or try the lease")

    @model_validator(mode="after")
    def _renew_within_ttl(self) -> HaConfig:
        if self.renew_every * 2 > self.lease_ttl:
            raise ValueError("ha.renew_every must be at most half of ha.lease_ttl")
        return self


class BudgetConfig(Section):
    global_per_hour: float | None = Field(None, gt=0, description="cap on the fleet's spend rate, USD/hour")
    tenants: dict[str, float] = Field(default_factory=dict, description="per-tenant caps, USD/hour")


class GpuPartitioningConfig(Section):
    """How MIG devices and GPU fractions are laid out and enforced (docs/gpu-partitioning.md)."""

    mig_layouts: dict[str, str] = Field(
        default_factory=dict, description="instance type or GPU model -> MIG layout per GPU, e.g. a100: 7x1g.5gb"
    )
    mig_reconfigure: bool = Field(False, description="agents may create the declared GPU/compute instances via NVML")
    mps: bool = Field(True, description="run gpu_fraction jobs under CUDA MPS (else time-sliced)")
    memory_over: Literal["warn", "stop"] = Field("stop", description="a job over its GPU memory share: warn or stop")
    memory_grace_samples: int = Field(3, ge=1, description="consecutive samples over the share before a stop")

    @field_validator("mig_layouts")
    @classmethod
    def _valid_layouts(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            try:
                parse_mig_layout(str(text))
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
        return {k.lower(): str(v) for k, v in value.items()}

    def policy(self) -> PartitionPolicy:
        return PartitionPolicy(
            mig_layouts={k: parse_mig_layout(v) for k, v in self.mig_layouts.items()},
            mig_reconfigure=self.mig_reconfigure, mps=self.mps, memory_over=self.memory_over,
            memory_grace_samples=self.memory_grace_samples,
        )  # fmt: skip


def _default_providers() -> dict[str, dict[str, Any]]:
    return {"local": {}}


class Config(Section):
    """The controller's configuration (`spotfleet up --config FILE`); every key is optional."""

    cluster: str = Field("default", pattern=r"^[a-z0-9][a-z0-9-]{0,40}$",
                         description="ownership tag on every instance spotfleet buys")  # fmt: skip
    data_dir: Path = Field(Path("~/.spotfleet"), description="SQLite file, job logs, local instances, checkpoints")
    database: str | None = Field(None, description="SQLAlchemy URL; default sqlite in data_dir")
    api: ApiConfig = Field(default_factory=ApiConfig)
    reconcile: ReconcileConfig = Field(default_factory=ReconcileConfig)
    ha: HaConfig = Field(default_factory=HaConfig, description="leader lease of replicated controllers")
    policy: Literal["spotfleet", "simple"] = Field(
        "spotfleet", description="spotfleet: cost per unit of work; simple: cheapest fit by class"
    )
    budgets: BudgetConfig = Field(default_factory=BudgetConfig)
    checkpoint_root: str | None = Field(None, description="shared path for checkpoints; default data_dir/checkpoints")
    providers: dict[str, dict[str, Any]] = Field(
        default_factory=_default_providers,
        description="provider name → its settings (sections below: aws, gcp, local)",
    )
    gpu_partitioning: GpuPartitioningConfig = Field(
        default_factory=GpuPartitioningConfig, description="MIG layouts, MPS, GPU memory shares"
    )
    market_history: list[Path] = Field(
        default_factory=list,
        description="spot trace files or folders (the schema of shared/data/traces; each trace's cloud names the "
        "provider) whose availability runs the controller learns at start, before it has watched the market itself",
    )

    @property
    def data_path(self) -> Path:
        return self.data_dir.expanduser()

    @property
    def database_url(self) -> str:
        return self.database or f"sqlite:///{self.data_path / 'spotfleet.db'}"


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_config(path: Path | None = None, *, overrides: dict[str, Any] | None = None) -> Config:
    """Read, merge env overrides and validate; ``InvalidSpec`` names the key."""
    data: dict[str, Any] = {}
    source = str(path) if path else None
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidSpec("", f"cannot read config: {exc.strerror}", source=source) from None
        except UnicodeDecodeError:
            raise InvalidSpec("", "the config is not UTF-8 text", source=source) from None
        except RecursionError:
            raise InvalidSpec("", "the config's YAML is nested too deeply", source=source) from None
        except yaml.YAMLError as exc:
            raise InvalidSpec("", f"malformed YAML: {exc}", source=source) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise InvalidSpec("", "the config must be a YAML mapping", source=source)
        data = loaded or {}
    env = os.environ
    if env.get("SPOTFLEET_DATABASE"):
        data["database"] = env["SPOTFLEET_DATABASE"]
    if env.get("SPOTFLEET_DATA_DIR"):
        data["data_dir"] = env["SPOTFLEET_DATA_DIR"]
    if env.get("SPOTFLEET_API_TOKEN"):
        data.setdefault("api", {})["token"] = env["SPOTFLEET_API_TOKEN"]
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        target = data
        *parents, leaf = key.split(".")
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    issues: list[tuple[str, str]] = []
    config: Config | None = None
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        issues.extend(format_validation_error(exc, model=Config, docs=CONFIG_DOCS).issues)
    providers = data.get("providers")
    if isinstance(providers, dict):
        issues.extend(provider_issues(providers))
    if issues or config is None:
        field, message = issues[0]
        raise InvalidSpec(field, message, source=source, issues=issues)
    return config


def provider_models() -> dict[str, type[BaseModel]]:
    """Each provider's settings model (pydantic only: no cloud SDK is imported)."""
    from spotfleet.providers.aws_config import AwsProviderConfig
    from spotfleet.providers.gcp_config import GcpProviderConfig
    from spotfleet.providers.local import LocalProviderConfig

    return {"aws": AwsProviderConfig, "gcp": GcpProviderConfig, "local": LocalProviderConfig}


def provider_issues(providers: dict[str, Any]) -> list[tuple[str, str]]:
    """Every problem in the ``providers`` section, checked with each provider's own
    model, so a typo in ``providers.aws`` is reported with the rest at load time."""
    import difflib

    models = provider_models()
    issues: list[tuple[str, str]] = []
    for name, section in providers.items():
        model = models.get(name)
        if model is None:
            guess = difflib.get_close_matches(str(name), list(models), n=1)
            hint = f"did you mean {guess[0]!r}? " if guess else ""
            issues.append((f"providers.{name}", f"unknown provider; {hint}use one of {', '.join(sorted(models))}"))
            continue
        try:
            model.model_validate(section or {})
        except ValidationError as exc:
            err = format_validation_error(exc, prefix=f"providers.{name}", model=model, docs=f"docs/{name}.md")
            issues.extend(err.issues)
    return issues
