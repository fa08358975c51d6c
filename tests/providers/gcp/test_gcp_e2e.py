"""End to end on "GCP": controller + GcpProvider + local Compute server + node agents.

1. A job is bought Spot capacity in the cheapest zone (us-east4-a); the VM boots
   from its real startup script and its agent runs the job.
2. The VM's metadata server announces a preemption (~30 s notice): the job
   checkpoints and exits to be resumed; then GCE preempts the VM
   (``compute.instances.preempted``, action DELETE).
3. The controller sees the notice and the preemption, avoids the reclaimed pool,
   and resumes the job from its checkpoint on a replacement in another zone.
4. The job finishes; the idle replacement is deleted: nothing is left running.

Real processes and real time (the job sleeps between steps), so this waits on
conditions with a timeout rather than on a policy.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import uvicorn
from google.auth.credentials import AnonymousCredentials

from spotfleet.api.app import create_app
from spotfleet.clock import SystemClock
from spotfleet.controller.controller import Controller
from spotfleet.model.job import JobState
from spotfleet.model.spec import JobSpec
from spotfleet.policies.simple import SimplePolicy
from spotfleet.providers.gcp import GcpProvider
from spotfleet.providers.gcp_config import GcpProviderConfig
from spotfleet.store import Store
from tests.providers.gcp.gce_server import ComputeServer, FakeCompute
from tests.providers.gcp.gce_vm import VmFleet
from tests.providers.gcp.gcp_support import CLUSTER, ZONES

pytestmark = pytest.mark.e2e
STEPS = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def api_port() -> int:
    return _free_port()


@pytest.fixture
def controller(tmp_path: Path, gce_server: ComputeServer, api_port: int) -> Iterator[Controller]:
    clock = SystemClock()
    config = GcpProviderConfig(project=gce_server.compute.project, zones=ZONES, api_endpoint=gce_server.endpoint)
    provider = GcpProvider(config, cluster=CLUSTER, clock=clock, credentials=AnonymousCredentials())
    store = Store(f"sqlite:///{tmp_path / 'spotfleet.db'}")
    store.migrate()
    ctl = Controller(
        store=store,
        providers={"gcp": provider},
        policy=SimplePolicy(idle_ttl=timedelta(seconds=1)),
        clock=clock,
        cluster=CLUSTER,
        data_dir=tmp_path,
        controller_url=lambda: f"http://127.0.0.1:{api_port}",
        heartbeat_seconds=0.2,
    )
    server = uvicorn.Server(
        uvicorn.Config(create_app(ctl), host="127.0.0.1", port=api_port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield ctl
    server.should_exit = True
    thread.join(timeout=10)
    store.close()


@pytest.fixture
def fleet(gce: FakeCompute, tmp_path: Path) -> Iterator[VmFleet]:
    vms = VmFleet(gce, tmp_path / "vms")
    yield vms
    vms.shutdown()


def test_preempted_spot_job_resumes_in_another_zone_and_nothing_is_left(
    controller: Controller, gce: FakeCompute, fleet: VmFleet, tmp_path: Path
) -> None:
    def run_until(condition: Callable[[], bool], what: str, *, timeout: float = 40.0, step: bool = True) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if step:
                controller.step()
            fleet.sync()
            if condition():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    spec = JobSpec.model_validate(
        {
            "name": "train",
            "command": [
                sys.executable,
                "-m",
                "spotfleet.demo_job",
                "--steps",
                str(STEPS),
                "--step-seconds",
                "0.05",
                "--checkpoint-every",
                "1000",
            ],
            "priority": "opportunistic",
            "resources": {"gpus": 1, "gpu_types": ["L4"]},
        }
    )
    job = controller.submit(spec)

    # 1. bought in the cheapest spot zone; the agent from the startup script runs it
    run_until(lambda: controller.get_job(job.id).state is JobState.RUNNING, "the job to run")
    [(zone, name)] = fleet.booted
    assert zone == "us-east4-a"
    first = fleet.vm(zone, name)
    run_until(lambda: controller.get_job(job.id).progress.get("step", 0) >= 5, "progress")

    # 2. 30 s notice from the metadata server: the job checkpoints and exits to be resumed
    first.metadata.announce("spot", 30)
    ckpt_dir = Path(controller.checkpoint_root) / job.id
    run_until(lambda: any(ckpt_dir.glob("ckpt-*")) and all(p.poll() is not None for p in first.agent.runner.procs.values()),
              "the checkpoint", step=False)  # fmt: skip
    checkpointed_at = max(json.loads(p.read_text())["step"] for p in ckpt_dir.glob("ckpt-*.json"))
    assert 5 <= checkpointed_at < STEPS
    # ... then GCE preempts the VM (Spot, termination action DELETE)
    gce.preempt(zone, name)

    # 3. resumed from the checkpoint on a replacement in another zone
    run_until(lambda: len(fleet.booted) == 2 and controller.get_job(job.id).state is JobState.RUNNING,
              "the replacement to run the job")  # fmt: skip
    second_zone = fleet.booted[1][0]
    assert second_zone != "us-east4-a"
    run_until(lambda: controller.get_job(job.id).state is JobState.SUCCEEDED, "the job to finish")
    done = controller.get_job(job.id)
    assert done.interruptions == 1 and done.attempt == 2 and done.failures == 0
    assert done.progress.get("step") == STEPS
    assert f"attempt 2: starting at step {checkpointed_at} of {STEPS}" in controller.logs(job.id)

    # 4. the idle replacement is given back; nothing left at the cloud or on the hosts
    run_until(lambda: not gce.instances and not fleet.vms, "the fleet to drain")
    assert controller.providers["gcp"].list_instances() == []
    assert not first.alive
    preempted = [o for o in gce.operations.values() if o["operationType"] == "compute.instances.preempted"]
    assert len(preempted) == 1
    events = {e.kind for e in controller.store.events(limit=500)}
    assert "instance.launch_failed" not in events
