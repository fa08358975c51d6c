"""The agent loop: register, then heartbeat and converge, until told to stop.

Every ``poll_seconds`` it checks its jobs; it reports to the controller every
``heartbeat_seconds``, or at once when a job exits or a notice arrives. If the
controller is unreachable the jobs keep running and the agent retries with
backoff: a controller restart must never kill work. A 401 means this instance
was retired: the agent stops its jobs and exits.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import httpx

import spotfleet
from spotfleet.agent.config import AgentConfig
from spotfleet.agent.runner import JobRunner
from spotfleet.agent.telemetry import GpuTelemetry, job_groups
from spotfleet.clock import Clock, SystemClock
from spotfleet.model.events import InstanceEvent
from spotfleet.wire import Heartbeat, HeartbeatResponse, LogChunk, NoticeReport, RegisterRequest

log = logging.getLogger(__name__)


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
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.http = http or httpx.Client(base_url=config.controller_url, timeout=10.0)
        self.gpu_count = gpu_count if gpu_count is not None else (config.gpus or 0)
        self.runner = JobRunner(work_dir=Path(config.work_dir), clock=self.clock,
                                kill_grace=config.kill_grace_seconds)  # fmt: skip
        self.telemetry = GpuTelemetry()  # NVML; says once if there is no driver
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
        self.runner.reconcile(answer.assignments)
        return answer

    def beat(self) -> HeartbeatResponse:
        self.runner.tick()
        with self._lock:
            notices, self.pending_notices = self.pending_notices, []
        beat = Heartbeat(
            jobs=self.runner.statuses(), notices=notices, telemetry=self.telemetry.sample(job_groups(self.runner))
        )
        try:
            answer = HeartbeatResponse.model_validate(self._post("/v1/agent/heartbeat", beat.model_dump(mode="json")))
        except Exception:
            with self._lock:
                self.pending_notices = notices + self.pending_notices  # keep them for the next try
            raise
        self.heartbeat_seconds = answer.heartbeat_seconds
        self.ship_logs()  # before reconcile forgets jobs that exited
        self.runner.reconcile(answer.assignments)
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

    def _post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        resp = self.http.post(path, json=body, headers=self._auth)
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
