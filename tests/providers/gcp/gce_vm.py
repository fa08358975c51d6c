"""VMs for the end-to-end test: a node agent per GCE instance, with its own
emulated GCP metadata server.

``VmFleet.sync()`` plays the hypervisor: for every RUNNING instance the local
Compute server holds, it boots a VM the way GCE would — it reads the instance's
``startup-script`` (rendered by ``spotfleet.bootstrap``), takes the agent config
the script would write, and starts the node agent with it. A VM whose instance
is gone (deleted, or preempted with action DELETE) is killed with its jobs.

``GcpMetadataServer`` speaks the part of the metadata protocol preemption needs:
``/computeMetadata/v1/instance/preempted`` (``FALSE``/``TRUE``), answered only
with ``Metadata-Flavor: Google``, and ``?wait_for_change=true`` hanging until the
value changes. ``MetadataPreemptionWatcher`` is a minimal stand-in for the
agent's GCP metadata watcher (which belongs to the interruption work): it hangs
on that endpoint and hands the ~30 s notice to the agent.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import yaml

from spotfleet.agent.agent import Agent
from spotfleet.agent.config import AgentConfig
from spotfleet.clock import SystemClock
from tests.providers.gcp.gce_server import FakeCompute

NOTICE = timedelta(seconds=30)


class GcpMetadataServer:
    """One VM's metadata server (loopback, its own port)."""

    def __init__(self, *, name: str, zone: str, instance_id: str) -> None:
        self.values = {
            "instance/preempted": "FALSE",
            "instance/name": name,
            "instance/id": instance_id,
            "instance/zone": f"projects/123456789012/zones/{zone}",
        }
        self._changed = threading.Condition()
        self._closing = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                key = url.path.removeprefix("/computeMetadata/v1/")
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._send(403, "Missing required header: Metadata-Flavor")
                if key not in outer.values:
                    return self._send(404, "not found")
                query = parse_qs(url.query)
                if query.get("wait_for_change") == ["true"]:
                    timeout = float(query.get("timeout_sec", ["30"])[0])
                    seen = outer.values[key]
                    with outer._changed:
                        outer._changed.wait_for(lambda: outer._closing or outer.values[key] != seen, timeout=timeout)
                self._send(200, outer.values[key])

            def _send(self, status: int, text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", "application/text")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def preempt(self) -> None:
        with self._changed:
            self.values["instance/preempted"] = "TRUE"
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()


class MetadataPreemptionWatcher(threading.Thread):
    """Hang on ``instance/preempted``; on ``TRUE`` give the agent a 30 s notice."""

    def __init__(self, agent: Agent, metadata_url: str) -> None:
        super().__init__(daemon=True, name="gce-preempted-watch")
        self.agent, self.url = agent, metadata_url

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers={"Metadata-Flavor": "Google"}, timeout=40) as http:
            while not self.agent.stopped.is_set():
                try:
                    resp = http.get(
                        "/computeMetadata/v1/instance/preempted",
                        params={"wait_for_change": "true", "timeout_sec": "5"},
                    )
                except httpx.HTTPError:
                    return
                if resp.status_code == 200 and resp.text.strip() == "TRUE":
                    now = self.agent.clock.now()
                    self.agent.notice(kind="spot_interruption", deadline=now + NOTICE, source="gce-metadata")
                    return


@dataclass
class Vm:
    zone: str
    name: str
    agent: Agent
    metadata: GcpMetadataServer
    threads: list[threading.Thread] = field(default_factory=list)

    def kill(self) -> None:
        """The machine is taken away: agent and jobs die together."""
        self.agent.stop()
        self.agent.runner.stop_all()
        self.metadata.close()
        for thread in self.threads:
            thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)


def agent_config_from_startup_script(script: str) -> dict[str, Any]:
    """The agent.yaml the bootstrap script would write (its quoted heredoc)."""
    body = script.split("<<'AGENT_CONFIG'\n", 1)[1].split("\nAGENT_CONFIG", 1)[0]
    data = yaml.safe_load(body)
    assert isinstance(data, dict)
    return data


class VmFleet:
    """Boots an agent for each RUNNING instance of ``compute``; kills the ones that went away."""

    def __init__(self, compute: FakeCompute, root: Path, *, gpus: int = 1) -> None:
        self.compute, self.root, self.gpus = compute, root, gpus
        self.vms: dict[tuple[str, str], Vm] = {}
        self.booted: list[tuple[str, str]] = []

    def sync(self) -> None:
        with self.compute.lock:
            instances = {k: dict(v) for k, v in self.compute.instances.items() if v["status"] == "RUNNING"}
        for key in [k for k in self.vms if k not in instances]:
            self.vms.pop(key).kill()
        for key, inst in instances.items():
            if key not in self.vms:
                self.vms[key] = self._boot(*key, inst)
                self.booted.append(key)

    def _boot(self, zone: str, name: str, inst: dict[str, Any]) -> Vm:
        items = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
        metadata = GcpMetadataServer(name=name, zone=zone, instance_id=inst["id"])
        config = agent_config_from_startup_script(items["startup-script"])
        assert config["metadata"] == "gcp"
        config.update(
            work_dir=str(self.root / name),
            metadata_url=metadata.url,
            provider_id=f"{zone}/{name}",
            gpus=self.gpus,
        )
        agent = Agent(AgentConfig.model_validate(config), clock=SystemClock(), gpu_count=self.gpus)
        vm = Vm(zone, name, agent, metadata)
        vm.threads = [
            threading.Thread(target=agent.run, daemon=True, name=f"agent-{name}"),
            MetadataPreemptionWatcher(agent, metadata.url),
        ]
        for thread in vm.threads:
            thread.start()
        return vm

    def vm(self, zone: str, name: str) -> Vm:
        return self.vms[(zone, name)]

    def shutdown(self) -> None:
        for vm in self.vms.values():
            vm.kill()
        self.vms.clear()
