"""Configuration of the GCP provider (pydantic, ``extra="forbid"``).

Design choice: everything the provider needs to build an instance lives here and
is validated up front, so a typo in a zone or label fails at start-up with the
field's dotted path, not at the first launch an hour later.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from spotfleet.model.durations import parse_duration

ZONE_RE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
REGION_RE = re.compile(r"^[a-z]+-[a-z]+\d+$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")

# Ubuntu accelerator images ship NVIDIA drivers signed for Secure Boot, so they
# boot with Shielded VM on. (Family name from GCP docs; unverified offline.)
DEFAULT_IMAGE = (
    "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accelerator-2204-amd64-with-nvidia-550"
)
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"

# GPU memory (GiB) of the accelerators that attach to N1 machine types.
N1_ACCELERATOR_MEMORY_GIB = {
    "nvidia-tesla-t4": 16.0,
    "nvidia-tesla-v100": 16.0,
    "nvidia-tesla-p100": 16.0,
    "nvidia-tesla-p4": 8.0,
}
N1_ACCELERATOR_NAMES = {
    "nvidia-tesla-t4": "T4",
    "nvidia-tesla-v100": "V100",
    "nvidia-tesla-p100": "P100",
    "nvidia-tesla-p4": "P4",
}


class N1GpuShape(BaseModel):
    """An N1 machine type with attached GPUs, offered because it is configured.

    The bundled catalog has no N1 rows (their price is machine + accelerator), so
    the prices are given here, in USD per instance-hour.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    machine_type: str = Field(pattern=r"^n1-(standard|highmem|highcpu)-\d+$")
    accelerator: Literal["nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4"]
    count: Literal[1, 2, 4, 8] = 1
    on_demand_price: float = Field(gt=0)
    spot_price: float | None = Field(default=None, gt=0)

    @property
    def instance_type(self) -> str:
        """How this shape appears as an offering: ``n1-standard-8+1xnvidia-tesla-t4``."""
        return f"{self.machine_type}+{self.count}x{self.accelerator}"


class GcpProviderConfig(BaseModel):
    """Where and how spotfleet buys Compute Engine VMs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    project: str = Field(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
    zones: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    network: str = "global/networks/default"
    subnetwork: str | None = None
    external_ip: bool = False
    network_tags: tuple[str, ...] = ()
    service_account: str | None = None
    service_account_scopes: tuple[str, ...] = (CLOUD_PLATFORM_SCOPE,)
    image: str = DEFAULT_IMAGE
    boot_disk_gb: int = Field(default=200, ge=10)
    boot_disk_type: str | None = None  # None: pd-balanced, hyperdisk-balanced where required
    secure_boot: bool = True
    labels: dict[str, str] = Field(default_factory=dict)
    termination_action: Literal["DELETE", "STOP"] = "DELETE"
    max_run_duration: Annotated[timedelta, Field(gt=timedelta(0))] | None = None
    n1_gpus: tuple[N1GpuShape, ...] = ()
    billing_refresh: bool = False  # reprice offerings from the Cloud Billing Catalog API
    billing_api_key: SecretStr | None = None
    billing_endpoint: str = "https://cloudbilling.googleapis.com"
    api_endpoint: str | None = None  # e.g. http://127.0.0.1:8085 for an emulator
    anonymous_credentials: bool = False  # emulators only: send no credentials
    offerings_ttl: timedelta = timedelta(hours=1)
    request_timeout_s: float = Field(default=60.0, gt=0)
    operation_wait_rounds: int = Field(default=3, ge=1)
    preemption_notice: timedelta = timedelta(seconds=30)
    default_retry_after_s: float = Field(default=5.0, gt=0)

    @field_validator("max_run_duration", "offerings_ttl", "preemption_notice", mode="before")
    @classmethod
    def _parse_durations(cls, value: object) -> timedelta | None:
        return None if value is None else parse_duration(value)

    @field_validator("zones")
    @classmethod
    def _zones_well_formed(cls, zones: tuple[str, ...]) -> tuple[str, ...]:
        for zone in zones:
            if not ZONE_RE.match(zone):
                raise ValueError(f"{zone!r} is not a zone name such as 'us-central1-a'")
        return zones

    @field_validator("regions")
    @classmethod
    def _regions_well_formed(cls, regions: tuple[str, ...]) -> tuple[str, ...]:
        for region in regions:
            if not REGION_RE.match(region):
                raise ValueError(f"{region!r} is not a region name such as 'us-central1'")
        return regions

    @field_validator("labels")
    @classmethod
    def _labels_valid(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if not LABEL_KEY_RE.match(key) or key.startswith("spotfleet-"):
                raise ValueError(
                    f"label key {key!r}: lowercase letters, digits, '_' or '-', starting with a letter, "
                    "at most 63 characters, and not starting with 'spotfleet-' (reserved for ownership)"
                )
            if not LABEL_VALUE_RE.match(value):
                raise ValueError(f"label {key}={value!r}: values are lowercase letters, digits, '_' or '-', at most 63")
        return labels

    @model_validator(mode="after")
    def _somewhere(self) -> GcpProviderConfig:
        if not self.zones and not self.regions:
            raise ValueError("set zones or regions: spotfleet needs to know where it may buy")
        return self
