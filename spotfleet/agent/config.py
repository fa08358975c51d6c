"""Agent configuration (``/etc/spotfleet/agent.yaml`` on a cloud node)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spotfleet.errors import InvalidSpec


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    controller_url: str
    token: str = Field(..., min_length=8)
    cluster: str = "default"
    work_dir: Path = Path("/var/lib/spotfleet")
    provider_id: str | None = Field(None, description="the cloud's instance id; read from metadata when absent")
    metadata: Literal["aws", "gcp", "none"] = "none"
    metadata_url: str | None = None
    gpus: int | None = Field(None, ge=0, description="GPUs to expose; detected with NVML when absent")
    heartbeat_seconds: float = Field(2.0, gt=0)
    poll_seconds: float = Field(0.2, gt=0, description="how often job exits are checked")
    kill_grace_seconds: float = Field(5.0, ge=0, description="SIGTERM → SIGKILL for cancelled jobs")
    log_chunk_bytes: int = Field(65536, gt=0)
    notice_poll_seconds: float = Field(1.0, gt=0)
    mps_control: str = Field("nvidia-cuda-mps-control", description="the CUDA MPS control program (gpu_fraction jobs)")


def load_agent_config(path: Path) -> AgentConfig:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidSpec("", f"cannot read agent config: {exc}", source=str(path)) from None
    try:
        return AgentConfig.model_validate(data or {})
    except ValidationError as exc:
        from spotfleet.model.spec import format_validation_error

        raise format_validation_error(exc, model=AgentConfig, docs="docs/reference.md#agent-config",
                                      source=str(path)) from None  # fmt: skip
