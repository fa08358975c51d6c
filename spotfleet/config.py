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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from spotfleet.errors import InvalidSpec
from spotfleet.model.durations import Duration
from spotfleet.model.spec import format_validation_error


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ApiConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(8478, ge=0, le=65535)
    token: str | None = Field(None, description="bearer token users must send; required off loopback")
    advertise_url: str | None = Field(None, description="URL node agents use to reach the controller")

    @model_validator(mode="after")
    def _token_off_loopback(self) -> ApiConfig:
        if not is_loopback(self.host) and not self.token:
            raise ValueError(
                f"refusing to listen on {self.host} without an API token: set api.token "
                "(or SPOTFLEET_API_TOKEN), or bind 127.0.0.1"
            )
        return self


class ReconcileConfig(Section):
    interval: Duration = timedelta(seconds=5)
    idle_ttl: Duration = timedelta(minutes=5)
    agent_timeout: Duration = timedelta(minutes=2)
    boot_timeout: Duration = timedelta(minutes=15)
    heartbeat: Duration = timedelta(seconds=2)
    offerings_ttl: Duration = timedelta(minutes=10)


class BudgetConfig(Section):
    global_per_hour: float | None = Field(None, gt=0, description="cap on the fleet's spend rate, USD/hour")
    tenants: dict[str, float] = Field(default_factory=dict, description="per-tenant caps, USD/hour")


class LocalProviderConfig(Section):
    max_instances: int = Field(16, ge=1)
    heartbeat: Duration = timedelta(seconds=1)


def _default_providers() -> dict[str, dict[str, Any]]:
    return {"local": {}}


class Config(Section):
    cluster: str = Field("default", pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")
    data_dir: Path = Path("~/.spotfleet")
    database: str | None = Field(None, description="SQLAlchemy URL; default sqlite in data_dir")
    api: ApiConfig = Field(default_factory=ApiConfig)
    reconcile: ReconcileConfig = Field(default_factory=ReconcileConfig)
    policy: Literal["spotfleet", "simple"] = "spotfleet"
    budgets: BudgetConfig = Field(default_factory=BudgetConfig)
    checkpoint_root: str | None = Field(None, description="shared path for checkpoints; default data_dir/checkpoints")
    providers: dict[str, dict[str, Any]] = Field(default_factory=_default_providers)

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
            loaded = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise InvalidSpec("", f"cannot read config: {exc.strerror}", source=source) from None
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
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        err = format_validation_error(exc)
        raise InvalidSpec(err.field, err.message, source=source) from None
