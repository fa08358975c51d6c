"""The node agents' side of the controller: register, heartbeat, logs, and the
answer to each — every job attempt that should run on the instance.

Agents authenticate with their per-instance token and speak only for their own
instance: a report, event or log about a job bound elsewhere is dropped. What
they send goes to the store's inbox tables (presence, node reports, notices,
usage) and wakes the reconcile step when it brings news; lifecycle state is
changed only by the step (``Controller.step``).
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from spotfleet.clock import Clock
from spotfleet.controller import partitions
from spotfleet.controller.logs import JobLogs, safe_id
from spotfleet.ledger.usage import UsageRecorder
from spotfleet.model.changes import AgentView, EventRecord, HeartbeatRecord
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Checkpoint, Job, JobState
from spotfleet.model.partition import PartitionPolicy
from spotfleet.model.snapshot import NodeReport
from spotfleet.store.store import Store
from spotfleet.wire import Assignment, DrainOrder, Heartbeat, HeartbeatResponse, LogChunk, RegisterRequest

log = logging.getLogger(__name__)

# A gang's rendezvous port (MASTER_PORT): a fixed function of the job id and the
# attempt, in 20000-29999 — below Linux's ephemeral range (32768+), so an
# outgoing connection never holds it, and a new attempt never races a dying one
# of the last attempt for the same port on rank 0's node.
RENDEZVOUS_PORT_BASE = 20000
RENDEZVOUS_PORT_SPAN = 10000


def rendezvous_port(job_id: str, attempt: int) -> int:
    """MASTER_PORT of ``job_id``'s ``attempt``: the same on every node, every time."""
    return RENDEZVOUS_PORT_BASE + zlib.crc32(f"{job_id}/{attempt}".encode()) % RENDEZVOUS_PORT_SPAN


def rendezvous_env(job: Job, rank: int, addresses: Mapping[str, str | None]) -> dict[str, str]:
    """torchrun's names for a gang node: MASTER_ADDR (rank 0's address; absent while
    it is unknown), MASTER_PORT, NNODES, NODE_RANK, NPROC_PER_NODE (one process per
    GPU, at least one), WORLD_SIZE (processes in the gang) and RANK (the global
    rank of this node's first process). Only for a gang (``nodes > 1``)."""
    nodes = job.spec.resources.nodes
    if nodes <= 1:
        return {}
    nproc = max(1, job.spec.resources.gpus)
    env = {
        "MASTER_PORT": str(rendezvous_port(job.id, job.attempt)), "NNODES": str(nodes), "NODE_RANK": str(rank),
        "NPROC_PER_NODE": str(nproc), "WORLD_SIZE": str(nodes * nproc), "RANK": str(rank * nproc),
    }  # fmt: skip
    master = next((b.instance_id for b in job.bindings if b.node_rank == 0), None)
    if master is not None and addresses.get(master):
        env["MASTER_ADDR"] = str(addresses[master])
    return env


class Unauthorized(Exception):
    """An agent presented a token that matches no live instance."""


class Forbidden(Unauthorized):
    """A known agent asked for something of another instance (the API's 403)."""


class AgentGateway:
    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        logs: JobLogs,
        checkpoint_root: str,
        heartbeat_seconds: float,
        partition_policy: PartitionPolicy,
        wake: Callable[[], None],
    ) -> None:
        self.store = store
        self.clock = clock
        self.logs = logs
        self.checkpoint_root = checkpoint_root
        self.heartbeat_seconds = heartbeat_seconds
        self.partition_policy = partition_policy
        self.wake = wake  # the controller's: runs a reconcile step soon
        self.usage = UsageRecorder()  # progress + GPU telemetry folds for the cost ledger

    def _live(self, view: AgentView) -> Instance:
        if not view.instance.live:
            raise Unauthorized("unknown or retired agent token")
        return view.instance

    def _exchange(self, token: str, build: Callable[[AgentView], HeartbeatRecord]) -> AgentView:
        view = self.store.agent_exchange(token, build)
        if view is None:
            raise Unauthorized("unknown or retired agent token")
        return view

    def register(self, token: str, request: RegisterRequest) -> HeartbeatResponse:
        now = self.clock.now()

        def build(view: AgentView) -> HeartbeatRecord:
            inst = self._live(view)
            if request.provider_id and inst.provider_id and request.provider_id != inst.provider_id:
                raise Forbidden(f"this token belongs to {inst.id} ({inst.provider_id}), not {request.provider_id}")
            return HeartbeatRecord(inst.id, request.provider_id or inst.provider_id, now,
                                   info=request.model_dump(mode="json"))  # fmt: skip

        view = self._exchange(token, build)
        self.wake()
        return self.desired_state(view.instance, list(view.placed), view.addresses)

    def heartbeat(self, token: str, beat: Heartbeat) -> HeartbeatResponse:
        """Record a heartbeat (presence, reports, notices, events, usage) in one
        transaction and answer with what should run on the instance."""
        now = self.clock.now()

        def build(view: AgentView) -> HeartbeatRecord:
            inst = self._live(view)
            own = _owner(view)
            info: dict[str, Any] = {"telemetry": beat.telemetry} if beat.telemetry else {}
            if beat.partitions:
                info["partitions"] = beat.partitions
            events = []
            for e in beat.events:
                if e.job_id is not None and not own(e.job_id, e.attempt, e.node_rank):
                    log.warning("ignoring an event from %s about %s, which is not bound to it", inst.id, e.job_id)
                    continue
                events.append(EventRecord(at=e.at, kind=e.kind, level=e.level, message=e.message, job_id=e.job_id,
                                          instance_id=inst.id, data=e.data))  # fmt: skip
            mine = [j for j in beat.jobs if own(j.job_id, j.attempt, j.node_rank)]
            if len(mine) < len(beat.jobs):
                log.warning("ignored %d report(s) from %s about jobs not bound to it", len(beat.jobs) - len(mine),
                            inst.id)  # fmt: skip
            reports = [
                NodeReport(
                    job_id=j.job_id, attempt=j.attempt, node_rank=j.node_rank, instance_id=inst.id, status=j.status,
                    exit_code=j.exit_code, progress=j.progress, reported_at=now, message=j.message,
                    node_error=j.node_error, checkpoint=Checkpoint(j.checkpoint.path, j.checkpoint.step, j.checkpoint.at, j.attempt)
                    if j.checkpoint else None,
                )
                for j in mine
            ]  # fmt: skip
            usage, idle_events = self.usage.fold(inst.id, beat, mine, now=now, jobs_bound=bool(mine or view.placed))
            notices = [
                InstanceEvent(provider=inst.provider, provider_instance_id=inst.provider_id, kind=NoticeKind(n.kind),
                              observed_at=n.observed_at, deadline=n.deadline, source=n.source)
                for n in beat.notices
            ] if inst.provider_id else []  # fmt: skip
            return HeartbeatRecord(inst.id, inst.provider_id, now, info=info, reports=reports, notices=notices,
                                   events=[*events, *idle_events], usage=usage)  # fmt: skip

        view = self._exchange(token, build)
        placed = list(view.placed)
        if beat.notices or beat.events or _news(beat, placed):
            self.wake()
        return self.desired_state(view.instance, placed, view.addresses)

    def append_log(self, token: str, chunk: LogChunk) -> int:
        """Append a chunk of a job's log; returns the new size (the agent's next offset).
        Only for an attempt that ran on the agent's own instance, checked before any
        file is touched."""
        inst = self.store.instance_for_token(token)
        if inst is None or not inst.live:
            raise Unauthorized("unknown or retired agent token")
        if not safe_id(chunk.job_id) or not self.store.attempt_ran_on(chunk.job_id, chunk.attempt, inst.id):
            raise Forbidden(f"{chunk.job_id!r} attempt {chunk.attempt} is not assigned to this instance")
        return self.logs.append(chunk.job_id, chunk.attempt, chunk.node_rank, offset=chunk.offset, data=chunk.data)

    def desired_state(
        self, inst: Instance, placed: list[tuple[Job, int]], addresses: Mapping[str, str | None] | None = None
    ) -> HeartbeatResponse:
        """Every job attempt that should run on ``inst`` right now. ``addresses``:
        instance id → network address of the gangs' nodes (the rendezvous)."""
        assignments = [self._assignment(job, rank, inst, addresses or {}) for job, rank in placed]
        return HeartbeatResponse(
            instance_id=inst.id,
            heartbeat_seconds=self.heartbeat_seconds,
            assignments=assignments,
            terminate=inst.state in (InstanceState.TERMINATING, InstanceState.TERMINATED),
            mig=partitions.mig_order_for(inst.offering, self.partition_policy),
        )

    def _assignment(self, job: Job, rank: int, instance: Instance, addresses: Mapping[str, str | None]) -> Assignment:
        spec = job.spec
        binding = next(b for b in job.bindings if b.node_rank == rank)
        drain = None
        if job.state is JobState.DRAINING and job.drain_deadline is not None:
            drain = DrainOrder(deadline=job.drain_deadline, reason=job.message)
        env = dict(spec.env)
        for name, value in rendezvous_env(job, rank, addresses).items():
            env.setdefault(name, value)  # the spec's own value (a fixed MASTER_PORT, say) wins
        env.update({"SPOTFLEET_NODE_RANK": str(rank), "SPOTFLEET_NUM_NODES": str(spec.resources.nodes)})
        ranked = sorted(job.bindings, key=lambda b: b.node_rank)
        return Assignment(
            job_id=job.id, attempt=job.attempt, run=job.run_number, node_rank=rank, num_nodes=spec.resources.nodes,
            name=spec.name,
            command=spec.command, image=spec.image, env=env, workdir=spec.workdir, gpu_indices=list(binding.gpu_indices),
            checkpoint_dir=os.path.join(self.checkpoint_root, job.id), resume=job.checkpoint is not None,
            checkpoint_signal=spec.checkpoint.signal,
            checkpoint_interval_seconds=spec.checkpoint.interval.total_seconds() if spec.checkpoint.interval else None,
            grace_seconds=spec.checkpoint.grace.total_seconds(), drain=drain,
            checkpoint_now=instance.notice_kind is NoticeKind.REBALANCE and spec.is_interruptible,
            peers=[b.instance_id for b in ranked],
            peer_addresses=[addresses.get(b.instance_id) or "" for b in ranked] if spec.resources.nodes > 1 else [],
            partition=partitions.partition_for(job, binding, instance.offering, self.partition_policy),
        )  # fmt: skip


def _owner(view: AgentView) -> Callable[[str, int | None, int | None], bool]:
    """Is (job, attempt, rank) a job attempt this instance holds or held?

    An agent speaks only for itself (issue 14): a report, event or log about a
    job bound elsewhere is dropped, never recorded, so one node's token cannot
    finish, fail or stop another node's work. Attempts that ended on this
    instance still count (their exit may arrive late)."""
    current = {(job.id, job.attempt, rank) for job, rank in view.placed}
    ran = {(job_id, attempt) for job_id, attempt, _ in view.ran_here}
    placed_jobs = {job.id for job, _ in view.placed}

    def own(job_id: str, attempt: int | None, rank: int | None) -> bool:
        if attempt is None:
            return job_id in placed_jobs
        return (job_id, attempt, rank or 0) in current or (job_id, attempt) in ran

    return own


def _news(beat: Heartbeat, placed: list[tuple[Job, int]]) -> bool:
    """Does this heartbeat change what the controller knows (a bound job started,
    a placed job exited)? Only then is a reconcile step worth waking for: a steady
    heartbeat from a busy fleet must not keep the step running back to back."""
    state = {(job.id, job.attempt): job.state for job, _ in placed}
    for j in beat.jobs:
        known = state.get((j.job_id, j.attempt))
        if known is None:
            continue
        if j.status in ("exited", "refused") or (j.status in ("started", "running") and known is JobState.BOUND):
            return True
    return False
