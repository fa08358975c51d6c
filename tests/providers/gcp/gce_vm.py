"""VMs for the end-to-end test: a node agent per GCE instance, with its own
emulated GCP metadata server.

``VmFleet.sync()`` plays the hypervisor: for every RUNNING instance the local
Compute server holds, it boots a VM the way GCE would — it reads the instance's
``startup-script`` (rendered by ``spotfleet.providers.bootstrap``), takes the agent config
the script would write, and starts the node agent with it. A VM whose instance
is gone (deleted, or preempted with action DELETE) is killed with its jobs.

Each VM gets the product's own emulated GCE metadata server
(``spotfleet.metadata``) and the agent's real GCP watcher (hanging
``instance/preempted?wait_for_change=true``), exactly as the node agent runs on
a real VM.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from spotfleet.agent.agent import Agent
from spotfleet.agent.config import AgentConfig
from spotfleet.agent.watch import start_notice_watcher
from spotfleet.clock import SystemClock
from spotfleet.metadata import MetadataServer, server_for
from tests.providers.gcp.gce_server import FakeCompute

NOTICE = timedelta(seconds=30)


@dataclass
class Vm:
    zone: str
    name: str
    agent: Agent
    metadata: MetadataServer
    threads: list[threading.Thread] = field(default_factory=list)

    def kill(self) -> None:
        """The machine is taken away: agent and jobs die together."""
        self.agent.stop()
        self.agent.runner.stop_all()
        self.metadata.stop()
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
        metadata = server_for("gcp", instance_id=inst["id"], zone=zone).start()
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
        vm.threads = [threading.Thread(target=agent.run, daemon=True, name=f"agent-{name}")]
        vm.threads[0].start()
        watcher = start_notice_watcher(agent)
        assert watcher is not None
        return vm

    def vm(self, zone: str, name: str) -> Vm:
        return self.vms[(zone, name)]

    def shutdown(self) -> None:
        for vm in self.vms.values():
            vm.kill()
        self.vms.clear()
