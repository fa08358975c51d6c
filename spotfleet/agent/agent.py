"""The agent loop: register, then heartbeat and converge, until told to stop.

Every ``poll_seconds`` it checks its jobs; it reports to the controller every
``heartbeat_seconds``, or at once when a job exits or a notice arrives. If the
controller is unreachable the jobs keep running and the agent retries with
backoff: a controller restart must never kill work. A 401 means this instance
was retired: the agent stops its jobs and exits.

GPU partitions (``isolation.py``): each answer's MIG order is applied before
its assignments are started, so a MIG job finds its device; each heartbeat
carries the partitions' state (MIG fitness, MPS daemons), and each sample of
GPU telemetry is checked against the jobs' memory shares (``enforce.py``):
warnings and stops travel as events with the next heartbeat.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import httpx

import spotfleet
from spotfleet.agent import isolation
from spotfleet.agent.config import AgentConfig
from spotfleet.agent.enforce import MemoryGuard
from spotfleet.agent.isolation import GpuShares
from spotfleet.agent.mps import MpsDaemons
from spotfleet.agent.partitions import MigNode
from spotfleet.agent.runner import JobRunner
from spotfleet.agent.telemetry import GpuTelemetry, job_groups
from spotfleet.clock import Clock, SystemClock
from spotfleet.model.events import InstanceEvent
from spotfleet.wire import AgentEvent, Heartbeat, HeartbeatResponse, LogChunk, NoticeReport, RegisterRequest

log = logging.getLogger(__name__)


def controller_urls(value: str) -> list[str]:
    """``http://a:8478,http://b:8478`` → each replica's URL (a load balancer's URL is one)."""
    return [u.strip().rstrip("/") for u in value.split(",") if u.strip()]


class Retired(Exception):
    """The controller no longer knows this instance."""


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        clock: Clock | None = None,
        http: httpx.Client | None = None,
        gpu_count: int | None = None,
        nvml: ModuleType | None = None,
        mps_control: str | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        # several controller replicas: ``controller_url`` lists them, comma-separated;
        # the agent stays on one while it answers and moves to the next when it does not
        self.urls = controller_urls(config.controller_url)
        self._clients = [http] if http is not None else [httpx.Client(base_url=u, timeout=10.0) for u in self.urls]
        self._current = 0
        self.gpu_count = gpu_count if gpu_count is not None else (config.gpus or 0)
        self.telemetry = GpuTelemetry(nvml)  # NVML (pynvml unless a test injects one); says once if there is no driver
        self.shares = GpuShares(
            MigNode(self.telemetry.nvml, now=self.clock.now),
            MpsDaemons(root=Path(config.work_dir) / "mps", control=mps_control or config.mps_control),
            self.telemetry.nvml,
        )
        self.memory_guard = MemoryGuard(self.clock.now)
        self.runner = JobRunner(work_dir=Path(config.work_dir), clock=self.clock,
                                kill_grace=config.kill_grace_seconds, shares=self.shares)  # fmt: skip
        self.pending_events: list[AgentEvent] = []
        self.instance_id: str | None = None
        self.heartbeat_seconds = config.heartbeat_seconds
        self.pending_notices: list[NoticeReport] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self.stopped = threading.Event()

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.token}"}

    # ------------------------------------------------------------ protocol

    def register(self) -> HeartbeatResponse:
        body = RegisterRequest(provider_id=self.config.provider_id, hostname=socket.gethostname(),
                               gpus=self.gpu_count, agent_version=spotfleet.__version__,
                               metadata_flavor=self.config.metadata)  # fmt: skip
        resp = self._post("/v1/agent/register", body.model_dump(mode="json"))
        answer = HeartbeatResponse.model_validate(resp)
        self.instance_id = answer.instance_id
        self.heartbeat_seconds = answer.heartbeat_seconds
        self._converge(answer)
        return answer

    def _converge(self, answer: HeartbeatResponse) -> None:
        """MIG layout first (a MIG job needs its device), then the assignments."""
        events = self.shares.apply(answer.mig)
        refused_before = set(self.runner.refused)
        self.runner.reconcile(answer.assignments)
        with self._lock:
            self.pending_events.extend(events)
        if events or set(self.runner.refused) - refused_before:
            self._wake.set()  # tell the controller now, not at the next interval

    def _gpu_sample(self) -> dict[str, object]:
        """Telemetry with each job's share, and the memory guard's verdicts acted on."""
        sample = self.telemetry.sample(job_groups(self.runner))
        grants = self.runner.grants()
        isolation.annotate(sample, grants)
        events, stops = self.memory_guard.check(sample, grants)
        for stop in stops:
            self.runner.stop_for(stop.key, stop.reason)
        with self._lock:
            self.pending_events.extend(events)
        return sample

    def beat(self) -> HeartbeatResponse:
        self.runner.tick()
        telemetry = self._gpu_sample()
        with self._lock:
            notices, self.pending_notices = self.pending_notices, []
            events, self.pending_events = self.pending_events, []
        beat = Heartbeat(jobs=self.runner.statuses(), notices=notices, telemetry=telemetry,
                         partitions=self.shares.report(), events=events)  # fmt: skip
        try:
            answer = HeartbeatResponse.model_validate(self._post("/v1/agent/heartbeat", beat.model_dump(mode="json")))
        except Exception:
            with self._lock:
                self.pending_notices = notices + self.pending_notices  # keep them for the next try
                self.pending_events = events + self.pending_events
            raise
        self.heartbeat_seconds = answer.heartbeat_seconds
        self.ship_logs()  # before reconcile forgets jobs that exited
        self._converge(answer)
        return answer

    def ship_logs(self) -> None:
        for proc in list(self.runner.procs.values()):
            try:
                size = proc.log_path.stat().st_size
            except OSError:
                continue
            while proc.shipped < size:
                with open(proc.log_path, "rb") as fh:
                    fh.seek(proc.shipped)
                    raw = fh.read(self.config.log_chunk_bytes)
                text = raw.decode("utf-8", errors="replace")
                a = proc.assignment
                chunk = LogChunk(job_id=a.job_id, attempt=a.attempt, node_rank=a.node_rank,
                                 offset=proc.remote_offset, data=text)  # fmt: skip
                resp = self._post("/v1/agent/logs", chunk.model_dump(mode="json"))
                remote_size = resp.get("size", 0)
                proc.remote_offset = remote_size if isinstance(remote_size, int) else 0
                proc.shipped += len(raw)

    def notice(self, event: InstanceEvent) -> None:
        """Called by the metadata watcher's thread: tell the jobs now, the controller next."""
        self.runner.notice(event)
        report = NoticeReport(kind=event.kind.value, deadline=event.deadline, observed_at=event.observed_at,
                              source=event.source)  # fmt: skip
        with self._lock:
            self.pending_notices.append(report)
        self._wake.set()

    @property
    def http(self) -> httpx.Client:
        return self._clients[self._current]

    @property
    def controller_url(self) -> str:
        """The replica this agent talks to now."""
        return self.urls[self._current % len(self.urls)] if self.urls else ""

    def _post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        """POST to the current replica; on a connection error or a 5xx, try each
        other replica once before giving up (the caller retries with backoff)."""
        for tried in range(len(self._clients)):
            try:
                resp = self.http.post(path, json=body, headers=self._auth)
                if resp.status_code < 500 or tried == len(self._clients) - 1:
                    break
            except httpx.TransportError:
                if tried == len(self._clients) - 1:
                    raise
            previous = self.controller_url
            self._current = (self._current + 1) % len(self._clients)
            log.warning("controller %s unavailable; trying %s", previous, self.controller_url)
        if resp.status_code in (401, 403):
            raise Retired(resp.text)
        resp.raise_for_status()
        data = resp.json()
        return data if isinstance(data, dict) else {}

    # ------------------------------------------------------------ loop

    def run(self, *, sleep: Callable[[float], bool] | None = None) -> None:
        """Run until ``stop()``; ``sleep(seconds)`` returns True when woken early."""
        wait = sleep or self._wait
        backoff = 0.5
        while not self.stopped.is_set():
            try:
                self.register()
                break
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("cannot register with %s: %s; retrying", self.config.controller_url, exc)
                wait(backoff)
                backoff = min(backoff * 2, 15.0)
            except Retired:
                log.error("the controller refused this agent's token; exiting")
                return
        last_beat = self.clock.now()
        watched = self.runner.running_keys()
        backoff = 0.5
        while not self.stopped.is_set():
            now = self.clock.now()
            due = now - last_beat >= timedelta(seconds=self.heartbeat_seconds)
            if due or self.runner.exited_since(watched) or self._wake.is_set():
                self._wake.clear()
                try:
                    self.beat()
                    backoff = 0.5
                    last_beat = self.clock.now()
                    watched = self.runner.running_keys()
                except Retired:
                    log.error("instance retired by the controller; stopping jobs")
                    self.runner.stop_all()
                    self.shares.mps.stop_all()
                    return
                except (httpx.HTTPError, ValueError) as exc:
                    log.warning("heartbeat failed: %s (jobs keep running)", exc)
                    wait(backoff)
                    backoff = min(backoff * 2, 15.0)
                    continue
            else:
                self.runner.tick()
            wait(self.config.poll_seconds)

    def _wait(self, seconds: float) -> bool:
        return self._wake.wait(seconds)

    def stop(self) -> None:
        self.stopped.set()
        self._wake.set()
