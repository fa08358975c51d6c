"""The agent ↔ controller protocol: pydantic models both sides import.

Kept free of FastAPI and SQLAlchemy so the node agent starts fast and installs
light. The protocol is declarative, like a kubelet's: every heartbeat carries
the node's observed state, and every answer carries the complete desired state
for that node (the jobs that should run there, and which to drain). An agent
that missed answers converges on the next one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from spotfleet.model.events import NoticeKind

# A job that exits with this code saved a checkpoint and asks to be resumed
# (an interruption, not a failure): the agent and the controller agree on it.
CHECKPOINTED_EXIT_CODE = 85

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Counters the store keeps in 32-bit INTEGER columns (attempts, ranks, exit
# codes, checkpoint steps): a larger number from an agent is its mistake, a 422
# naming the field, not PostgreSQL's "integer out of range" as a 500.
Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
Count32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
# A byte or page offset: past any file or listing, inside BIGINT and exact in a double.
MAX_OFFSET = 2**53


class Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RegisterRequest(Wire):
    provider_id: str | None = None
    hostname: str = ""
    gpus: Count32 = 0
    agent_version: str = ""
    metadata_flavor: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class CheckpointInfo(Wire):
    path: str
    step: Count32 | None = None
    at: datetime


class JobStatus(Wire):
    job_id: str
    attempt: Count32
    node_rank: Count32 = 0
    status: str  # started | running | exited | refused (the agent cannot give it its GPU share here)
    exit_code: Int32 | None = None
    checkpoint: CheckpointInfo | None = None
    progress: dict[str, Any] = Field(default_factory=dict)
    isolation: str | None = None  # mig | mps | time-sliced | whole (spotfleet.model.partition)
    isolation_note: str | None = None  # why not better isolated (e.g. "MPS unavailable: ...")
    message: str | None = None  # why the agent refused or stopped it
    node_error: str | None = None  # a failed job's output blames the node (CUDA/NVML error line)


class AgentEvent(Wire):
    """Something the agent decided on its own that the controller should record
    (a job over its GPU memory share, a stop for it, a MIG reconfiguration)."""

    # bounded like the events table's columns (``store.schema.EventRow``): a longer
    # value is the agent's mistake, a 422, not PostgreSQL's truncation error (a 500;
    # SQLite does not check lengths) — the API fuzzer's find in CI
    kind: Annotated[str, Field(max_length=64)]
    level: Annotated[str, Field(max_length=16)] = "info"
    message: str
    at: datetime
    job_id: Annotated[str, Field(max_length=64)] | None = None
    attempt: Count32 | None = None
    node_rank: Count32 | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class NoticeReport(Wire):
    kind: NoticeKind  # spot_interruption | rebalance | maintenance (an unknown kind is a 422)
    deadline: datetime | None = None
    observed_at: datetime
    source: str = "agent"


class Heartbeat(Wire):
    jobs: list[JobStatus] = Field(default_factory=list)
    notices: list[NoticeReport] = Field(default_factory=list)
    telemetry: dict[str, Any] = Field(default_factory=dict)
    partitions: dict[str, Any] = Field(default_factory=dict)  # MIG/MPS state and fitness (agent/partitions.py)
    events: list[AgentEvent] = Field(default_factory=list)


class DrainOrder(Wire):
    deadline: datetime
    reason: str = ""


class Partition(Wire):
    """The part of one GPU a job node was given (absent: whole GPUs)."""

    kind: str  # mig | fraction
    mig_profile: str | None = None
    fraction: float | None = None
    memory_limit_mib: float | None = None  # its share of the GPU's memory (enforced for fractions)
    mps: bool = True  # run the fraction under MPS where the node has it
    on_memory_over: str = "stop"  # warn | stop
    grace_samples: int = 3


class MigOrder(Wire):
    """The MIG layout every GPU of this instance should have (from the pool's config)."""

    layout: list[str]
    reconfigure: bool = False


class Assignment(Wire):
    """One node of one job attempt that should run on this instance."""

    job_id: str
    attempt: int
    run: int | None = None  # runs that started before this one + 1 (SPOTFLEET_ATTEMPT); None: use ``attempt``
    node_rank: int = 0
    num_nodes: int = 1
    name: str
    command: list[str] | str
    image: str | None = None  # run in this container image (docker/podman on the node)
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
    peer_addresses: list[str] = Field(default_factory=list)  # a gang's nodes' addresses, by rank ("" if unknown)
    partition: Partition | None = None


class HeartbeatResponse(Wire):
    instance_id: str
    heartbeat_seconds: float
    assignments: list[Assignment] = Field(default_factory=list)
    terminate: bool = False
    mig: MigOrder | None = None


class LogChunk(Wire):
    job_id: str
    attempt: Count32
    node_rank: Count32 = 0
    offset: Annotated[int, Field(ge=0, le=MAX_OFFSET)]
    data: str
