"""The agent ↔ controller protocol: pydantic models both sides import.

Kept free of FastAPI and SQLAlchemy so the node agent starts fast and installs
light. The protocol is declarative, like a kubelet's: every heartbeat carries
the node's observed state, and every answer carries the complete desired state
for that node (the jobs that should run there, and which to drain). An agent
that missed answers converges on the next one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PROTOCOL_VERSION = 1


class Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RegisterRequest(Wire):
    provider_id: str | None = None
    hostname: str = ""
    gpus: int = 0
    agent_version: str = ""
    metadata_flavor: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class CheckpointInfo(Wire):
    path: str
    step: int | None = None
    at: datetime


class JobStatus(Wire):
    job_id: str
    attempt: int
    node_rank: int = 0
    status: str  # started | running | exited
    exit_code: int | None = None
    checkpoint: CheckpointInfo | None = None
    progress: dict[str, Any] = Field(default_factory=dict)


class NoticeReport(Wire):
    kind: str  # spot_interruption | rebalance | maintenance
    deadline: datetime | None = None
    observed_at: datetime
    source: str = "agent"


class Heartbeat(Wire):
    jobs: list[JobStatus] = Field(default_factory=list)
    notices: list[NoticeReport] = Field(default_factory=list)
    telemetry: dict[str, Any] = Field(default_factory=dict)


class DrainOrder(Wire):
    deadline: datetime
    reason: str = ""


class Assignment(Wire):
    """One node of one job attempt that should run on this instance."""

    job_id: str
    attempt: int
    node_rank: int = 0
    num_nodes: int = 1
    name: str
    command: list[str] | str
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    gpu_indices: list[int] = Field(default_factory=list)
    checkpoint_dir: str
    resume: bool = False
    checkpoint_signal: str = "SIGUSR1"
    checkpoint_interval_seconds: float | None = None
    grace_seconds: float = 10.0
    drain: DrainOrder | None = None
    checkpoint_now: bool = False  # soft warning (rebalance): checkpoint early, keep running
    peers: list[str] = Field(default_factory=list)  # instance ids of every node, by rank


class HeartbeatResponse(Wire):
    instance_id: str
    heartbeat_seconds: float
    assignments: list[Assignment] = Field(default_factory=list)
    terminate: bool = False


class RegisterResponse(HeartbeatResponse):
    protocol: int = PROTOCOL_VERSION


class LogChunk(Wire):
    job_id: str
    attempt: int
    node_rank: int = 0
    offset: int
    data: str
