"""The local provider: "instances" are real processes on this machine.

Each launch starts ``spotfleet.providers.local_host`` in its own session; it
runs a real node agent that registers with the controller over HTTP and runs
jobs as real subprocesses. Instances live in ``state_dir/<provider id>/``, so a
restarted controller finds the ones it launched earlier by their ownership tag
(``list_instances`` reads the directories and checks the processes).

Offerings mirror real instance types and prices from the bundled catalog, so the
demo's dollars are the dollars those machines would cost. The GPUs are pretend:
jobs get ``CUDA_VISIBLE_DEVICES`` as they would on the real type.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import yaml
from pydantic import BaseModel, ConfigDict, Field

from spotfleet.catalog import load_catalog
from spotfleet.clock import Clock, SystemClock
from spotfleet.errors import InstanceNotFound, NotOwned, QuotaExceeded, QuotaScope
from spotfleet.files import private_dir, write_private
from spotfleet.model.durations import Duration
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.offering import Market, Offerings
from spotfleet.providers.base import TAG_CLUSTER, CloudState, LaunchRequest, ProviderInstance
from spotfleet.providers.local_host import kill_session

# A few real shapes from each cloud (catalog zone ids), small to large.
LOCAL_SHAPES: dict[str, tuple[str, ...]] = {
    "aws": ("g4dn.xlarge", "p3.2xlarge", "g5.xlarge", "g5.12xlarge", "p3.8xlarge", "p4d.24xlarge"),
    "gcp": ("g2-standard-4", "a2-highgpu-1g", "a2-highgpu-2g", "a3-highgpu-8g"),
}
LOCAL_ZONES: dict[str, tuple[str, ...]] = {
    "aws": ("use1-az1", "use1-az2"),
    "gcp": ("us-central1-a", "us-central1-b"),
}
GCP_PREFIXES = ("a2-", "a3-", "g2-", "n1-")
_ANNOUNCE = {
    NoticeKind.SPOT_INTERRUPTION: "spot",
    NoticeKind.REBALANCE: "rebalance",
    NoticeKind.MAINTENANCE: "maintenance",
}


class LocalProviderConfig(BaseModel):
    """The local provider: "instances" are processes on this machine running the real agent."""

    model_config = ConfigDict(extra="forbid")

    max_instances: int = Field(16, ge=1, description="at most this many local instances at once")
    heartbeat: Duration = Field(timedelta(seconds=1), description="how often local agents report")


def metadata_flavor(instance_type: str) -> str:
    return "gcp" if instance_type.startswith(GCP_PREFIXES) else "aws"


def local_offerings() -> Offerings:
    items = []
    for cloud in ("aws", "gcp"):
        for o in load_catalog([cloud], as_provider="local"):
            if o.instance_type in LOCAL_SHAPES[cloud] and o.zone in LOCAL_ZONES[cloud]:
                items.append(o)
    return Offerings(items)


class LocalProvider:
    name = "local"

    def __init__(
        self,
        *,
        state_dir: Path,
        cluster: str = "default",
        clock: Clock | None = None,
        heartbeat_seconds: float = 1.0,
        max_instances: int = 16,
        offerings: Offerings | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.cluster = cluster
        self.clock = clock or SystemClock()
        self.heartbeat_seconds = heartbeat_seconds
        self.max_instances = max_instances
        self._offerings = offerings if offerings is not None else local_offerings()
        self._reported: set[tuple[str, str]] = set()
        state_dir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ Protocol

    def offerings(self) -> Offerings:
        return self._offerings

    def launch(self, request: LaunchRequest) -> list[ProviderInstance]:
        existing = [i for i in self._all() if i.request_id == request.request_id]
        if existing:
            return existing
        running = [i for i in self._all() if i.state is not CloudState.TERMINATED]
        if len(running) + request.count > self.max_instances:
            raise QuotaExceeded(f"local provider runs at most {self.max_instances} instances", scope=QuotaScope.GLOBAL)
        return [self._start(request) for _ in range(request.count)]

    def terminate(self, provider_ids: Sequence[str], *, request_id: str) -> None:
        for pid in provider_ids:
            root = self._dir(pid)
            spec = self._spec(root)
            if spec["tags"].get(TAG_CLUSTER) != self.cluster:
                raise NotOwned(pid)
            host = self._host(root)
            if host is not None:
                try:
                    host.send_signal(signal.SIGTERM)
                    host.wait(timeout=5)
                except psutil.TimeoutExpired:
                    kill_session(host.pid)
                except psutil.Error:
                    pass
            if not (root / "terminated").exists() and not (root / "reclaimed").exists():
                (root / "terminated").write_text(self.clock.now().isoformat())

    def list_instances(self) -> list[ProviderInstance]:
        return [i for i in self._all() if i.tags.get(TAG_CLUSTER) == self.cluster]

    def get(self, provider_id: str) -> ProviderInstance:
        return self._describe(self._dir(provider_id))

    def poll_events(self) -> list[InstanceEvent]:
        events = []
        for inst in self.list_instances():
            root = self.state_dir / inst.provider_id
            notice = root / "notice.json"
            if notice.exists() and (inst.provider_id, "notice") not in self._reported:
                data = json.loads(notice.read_text())
                self._reported.add((inst.provider_id, "notice"))
                events.append(InstanceEvent(
                    self.name, inst.provider_id, NoticeKind(data["kind"]), self.clock.now(),
                    datetime.fromisoformat(data["deadline"]), source="local",
                ))  # fmt: skip
            if (root / "reclaimed").exists() and (inst.provider_id, "gone") not in self._reported:
                self._reported.add((inst.provider_id, "gone"))
                events.append(InstanceEvent(self.name, inst.provider_id, NoticeKind.TERMINATED, self.clock.now(),
                                            source="local"))  # fmt: skip
        return events

    # ------------------------------------------------------------ local controls

    def interrupt(self, provider_id: str, *, kind: NoticeKind = NoticeKind.SPOT_INTERRUPTION,
                  notice: timedelta = timedelta(minutes=2)) -> datetime:  # fmt: skip
        """Announce a reclaim like a cloud would: the instance's metadata service
        starts reporting it (the agent's watcher sees it) and, for a spot notice,
        the instance really dies at the deadline. The same notice also reaches
        the controller through ``poll_events`` (the cloud's event bus)."""
        from spotfleet.metadata.control import inject_notice

        root = self._dir(provider_id)
        host = json.loads((root / "host.json").read_text()) if (root / "host.json").exists() else {}
        url = host.get("metadata_url")
        if url is None or self._host(root) is None:
            raise InstanceNotFound(provider_id)
        answer = inject_notice(url, _ANNOUNCE[kind], notice_seconds=notice.total_seconds())
        deadline = datetime.fromisoformat(str(answer.get("deadline", "")).replace("Z", "+00:00")) if answer.get(
            "deadline") else self.clock.now() + notice  # fmt: skip
        (root / "notice.json").write_text(json.dumps({"kind": kind.value, "deadline": deadline.isoformat()}))
        return deadline

    # ------------------------------------------------------------ internals

    def _start(self, request: LaunchRequest) -> ProviderInstance:
        o = request.offering
        pid = f"local-{uuid.uuid4().hex[:10]}"
        root = self.state_dir / pid
        private_dir(root)
        (root / "work").mkdir(parents=True)
        now = self.clock.now()
        spec: dict[str, Any] = {
            "provider_id": pid, "request_id": request.request_id, "tags": dict(request.tags),
            "instance_type": o.instance_type, "region": o.region, "zone": o.zone, "market": o.market.value,
            "gpus": o.gpu_count, "launched_at": now.isoformat(), "metadata": metadata_flavor(o.instance_type),
        }  # fmt: skip
        (root / "instance.json").write_text(json.dumps(spec, indent=2))
        agent_cfg = {
            "controller_url": request.bootstrap.controller_url, "token": request.bootstrap.agent_token,
            "cluster": request.bootstrap.cluster, "work_dir": str(root / "work"), "provider_id": pid,
            "gpus": o.gpu_count, "heartbeat_seconds": self.heartbeat_seconds,
        }  # fmt: skip
        write_private(root / "agent.yaml", yaml.safe_dump(agent_cfg))  # it holds the agent's token
        subprocess.Popen(
            [sys.executable, "-m", "spotfleet.providers.local_host", str(root)],
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(root / "host.log", "ab"), cwd=str(root), env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        return self._describe(root, assume_running=True)

    def _dir(self, provider_id: str) -> Path:
        root = self.state_dir / provider_id
        if "/" in provider_id or not (root / "instance.json").exists():
            raise InstanceNotFound(provider_id)
        return root

    @staticmethod
    def _spec(root: Path) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((root / "instance.json").read_text())
        return data

    @staticmethod
    def _host(root: Path) -> psutil.Process | None:
        try:
            info = json.loads((root / "host.json").read_text())
            proc = psutil.Process(int(info["pid"]))
            started = datetime.fromisoformat(info["started_at"]).timestamp()
            if abs(proc.create_time() - started) > 5 or proc.status() == psutil.STATUS_ZOMBIE:
                return None  # pid reused by someone else
            return proc
        except (OSError, ValueError, KeyError, psutil.Error):
            return None

    def _describe(self, root: Path, *, assume_running: bool = False) -> ProviderInstance:
        spec = self._spec(root)
        gone = (root / "terminated").exists() or (root / "reclaimed").exists()
        if gone:
            state = CloudState.TERMINATED
        elif self._host(root) is not None:
            state = CloudState.RUNNING
        elif assume_running or not (root / "host.json").exists():
            state = CloudState.PENDING
        else:
            state = CloudState.TERMINATED  # the host died (machine crash)
        return ProviderInstance(
            provider=self.name, provider_id=spec["provider_id"], instance_type=spec["instance_type"],
            region=spec["region"], zone=spec["zone"], market=Market(spec["market"]), state=state,
            tags=spec["tags"], launched_at=datetime.fromisoformat(spec["launched_at"]).astimezone(UTC),
            address="127.0.0.1",
        )  # fmt: skip

    def _all(self) -> list[ProviderInstance]:
        out = []
        for root in sorted(self.state_dir.iterdir()):
            if (root / "instance.json").exists():
                out.append(self._describe(root))
        return out

    def stop_all(self) -> None:
        """Terminate every instance of this cluster (used by the demo at exit)."""
        live = [i.provider_id for i in self.list_instances() if i.state is not CloudState.TERMINATED]
        if live:
            self.terminate(live, request_id="stop-all")
