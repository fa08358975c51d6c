"""End to end on AWS (moto): controller + AWS provider + real node agents.

1. The controller (the real ``Service``: store, API, scheduler) runs with the AWS
   provider against the moto server; a job is submitted.
2. A fleet launches a tagged spot instance in moto. The test plays that
   instance: it reads the user data spotfleet put in the launch template (the
   bootstrap with the agent's secret), starts a node agent process with it, and
   serves an emulated IMDSv2 answering with that instance's id.
3. The job runs and checkpoints. Then AWS announces the reclaim twice, as it
   does: IMDS starts answering ``spot/instance-action`` and EventBridge delivers
   the "EC2 Spot Instance Interruption Warning" to the SQS queue the controller
   polls.
4. The controller buys a replacement (possibly ahead of the reclaim) and drains:
   the agent checkpoints the job, the job moves to the replacement (which the
   test plays too) and resumes from its checkpoint; the old instance is
   terminated in moto.
5. Idle, the replacement is given back: nothing spotfleet launched is left
   running in moto.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from aws_moto import CLUSTER, REGION, RULE_PATTERN, CatalogPrices, FleetShim, make_config

from spotfleet.clock import SystemClock
from spotfleet.metadata import AwsImdsServer
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import InstanceState
from spotfleet.model.job import JobState
from spotfleet.providers import registry
from spotfleet.providers.aws import AwsProvider
from spotfleet.providers.aws_events import SPOT_WARNING
from spotfleet.providers.base import TAG_CLUSTER

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def imds_instance_id(url: str) -> str:
    """What a booting node does first: ask IMDSv2 who it is."""
    import httpx

    token = httpx.put(f"{url}/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}).text
    return httpx.get(f"{url}/latest/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": token}).text


class RecordingAwsProvider(AwsProvider):
    """The AWS provider, recording what ``poll_events`` returned to the controller."""

    polled: list[InstanceEvent]

    def poll_events(self) -> list[InstanceEvent]:
        events = super().poll_events()
        self.polled = [*getattr(self, "polled", []), *events]
        return events


def wait_for(what: str, predicate: Callable[[], Any], *, timeout: float = 45.0) -> Any:
    """Wait for real processes (agents, jobs, the controller's scheduler) to get somewhere."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def agent_config_from_user_data(ec2: Any, fleet: FleetShim, request_id: str) -> dict[str, Any]:
    """The agent.yaml the bootstrap in this launch's user data would write."""
    sent = next(r for r in fleet.requests if r["ClientToken"] == request_id)
    spec = sent["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
    [version] = ec2.describe_launch_template_versions(
        LaunchTemplateId=spec["LaunchTemplateId"], Versions=[spec["Version"]]
    )["LaunchTemplateVersions"]
    script = base64.b64decode(version["LaunchTemplateData"]["UserData"]).decode()
    body = script.split("<<'AGENT_CONFIG'\n", 1)[1].split("\nAGENT_CONFIG", 1)[0]
    config: dict[str, Any] = yaml.safe_load(body)
    return config


def boot_node(
    ec2: Any, fleet: FleetShim, instance: Any, work_dir: Path, *, cluster: str = CLUSTER
) -> tuple[AwsImdsServer, subprocess.Popen[bytes]]:
    """Boot a launched instance as EC2 would: an IMDSv2 for it, and the agent its
    launch's user data configures (``<work_dir>.log`` holds the agent's output)."""
    imds = AwsImdsServer(instance_id=instance.provider_id, zone=instance.offering.zone,
                         instance_type=instance.offering.instance_type).start()  # fmt: skip
    agent = agent_config_from_user_data(ec2, fleet, instance.request_id)
    assert agent["cluster"] == cluster and agent["metadata"] == "aws"
    log = open(work_dir.with_suffix(".log"), "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "spotfleet.agent", "--controller-url", agent["controller_url"],
         "--token", agent["token"], "--provider-id", imds_instance_id(imds.url),
         "--work-dir", str(work_dir), "--gpus", "1", "--metadata", "aws",
         "--metadata-url", imds.url, "--heartbeat-seconds", "0.5"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return imds, proc


def provisioned(store: Any, exclude: set[str]) -> Any:
    """A launched instance (PROVISIONING or RUNNING) not in ``exclude``, or None."""
    return next(
        (i for i in store.list_instances() if i.provider_id and i.id not in exclude
         and i.state in (InstanceState.PROVISIONING, InstanceState.RUNNING)),
        None,
    )  # fmt: skip


@pytest.fixture
def queue(moto: str, session: boto3.Session) -> str:
    sqs = session.client("sqs", endpoint_url=moto)
    url = str(sqs.create_queue(QueueName="spotfleet-e2e")["QueueUrl"])
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = session.client("events", endpoint_url=moto)
    events.put_rule(Name="spotfleet-e2e", EventPattern=json.dumps(RULE_PATTERN))
    events.put_targets(Rule="spotfleet-e2e", Targets=[{"Id": "sqs", "Arn": arn}])
    return url


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_spot_interruption_on_aws_resumes_the_job_elsewhere(
    moto: str,
    session: boto3.Session,
    ec2: Any,
    queue: str,
    subnets: dict[str, str],
    catalog_prices: CatalogPrices,
    fleet: FleetShim,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agents: list[subprocess.Popen[bytes]],
) -> None:
    from spotfleet.config import load_config
    from spotfleet.model.spec import parse_spec
    from spotfleet.service import Service

    zone = sorted(subnets)[0]
    aws_config = make_config(moto, subnets={zone: [subnets[zone]]}, sqs_queue_url=queue)
    provider = RecordingAwsProvider(aws_config, cluster=CLUSTER, clock=SystemClock(), session=session)
    monkeypatch.setitem(registry.FACTORIES, "aws", lambda options, **_: provider)
    config = load_config(overrides={
        "cluster": CLUSTER, "data_dir": str(tmp_path / "controller"), "api.port": 0,
        "reconcile.interval": "0.5s", "reconcile.idle_ttl": "2s", "reconcile.heartbeat": "0.5s",
        "providers": {"aws": {}}, "checkpoint_root": str(tmp_path / "checkpoints"),
    })  # fmt: skip
    service = Service(config)
    servers: list[AwsImdsServer] = []
    service.start_background()
    try:
        store = service.store

        def play(instance: Any, name: str) -> AwsImdsServer:
            imds, agent = boot_node(ec2, fleet, instance, tmp_path / name)
            servers.append(imds)
            agents.append(agent)
            return imds

        spec = parse_spec({
            "name": "e2e-train", "priority": "opportunistic",
            "resources": {"gpus": 1, "gpu_types": ["A10G"]},
            "command": [sys.executable, "-m", "spotfleet.demo_job", "--steps", "200", "--step-seconds", "0.05",
                        "--checkpoint-every", "20"],
            "checkpoint": {"interval": "60s"},  # the job checkpoints every 20 steps itself
        })  # fmt: skip
        job = service.controller.submit(spec)

        # 2. a tagged spot instance appears in moto; the test boots it
        first = wait_for("the first instance", lambda: provisioned(store, set()))
        [cloud] = [
            i for r in ec2.describe_instances(InstanceIds=[first.provider_id])["Reservations"] for i in r["Instances"]
        ]
        tags = {t["Key"]: t["Value"] for t in cloud["Tags"]}
        assert tags[TAG_CLUSTER] == CLUSTER and cloud.get("InstanceLifecycle") == "spot"
        assert cloud["InstanceType"] == "g5.xlarge"
        imds = play(first, "node-1")

        # 3. the job runs past a checkpoint, then AWS announces the reclaim
        wait_for("a checkpoint", lambda: (store.get_job(job.id).progress.get("step") or 0) >= 30)
        imds.announce("spot")  # IMDS: spot/instance-action, two minutes ahead
        session.client("events", endpoint_url=moto).put_events(Entries=[{
            "Source": "aws.ec2", "DetailType": SPOT_WARNING, "Resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{first.provider_id}"],
            "Detail": json.dumps({"instance-id": first.provider_id, "instance-action": "terminate"}),
        }])  # fmt: skip

        # 4. drained, requeued, old instance terminated in moto, replacement bought
        wait_for("the EventBridge notice", lambda: any(
            e.provider_instance_id == first.provider_id and e.kind is NoticeKind.SPOT_INTERRUPTION
            for e in getattr(provider, "polled", [])
        ))  # fmt: skip
        second = wait_for("a replacement instance", lambda: provisioned(store, {first.id}), timeout=60)
        assert second.provider_id != first.provider_id and second.request_id != first.request_id
        # the replacement may be bought ahead of the reclaim, while the job still drains
        play(second, "node-2")
        done = wait_for("the job to finish", lambda: (j := store.get_job(job.id)).terminal and j, timeout=90)
        assert done.state is JobState.SUCCEEDED, done.message
        assert done.interruptions >= 1 and done.attempt == 2
        ran_on = [(a["attempt"], a["instance_id"]) for a in store.job_attempts(job.id)]
        assert ran_on == [(1, first.id), (2, second.id)]
        log = service.controller.logs(job.id)
        checkpointed = re.search(r"checkpointed at step (\d+); exiting to be resumed", log)
        assert checkpointed, log  # the agent drained the job with a checkpoint
        resumed_from = int(checkpointed.group(1))
        assert resumed_from >= 30
        assert f"attempt 2: starting at step {resumed_from} of 200" in log  # resumed, not restarted

        # 5. nothing spotfleet launched is left running in moto
        def all_gone() -> bool:
            pages = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [CLUSTER]}])
            states = [i["State"]["Name"] for r in pages["Reservations"] for i in r["Instances"]]
            return len(states) >= 2 and all(s in ("shutting-down", "terminated") for s in states)

        wait_for("every instance terminated in moto", all_gone, timeout=30)
    except BaseException:
        for record in reversed(service.store.events(limit=80)):
            sys.stderr.write(f"{record.at:%H:%M:%S} {record.kind}: {record.message}\n")
        for inst in service.store.list_instances():
            sys.stderr.write(f"instance {inst.id} {inst.provider_id} {inst.state.value} {inst.message}\n")
        raise
    finally:
        service.stop()
        for server in servers:
            server.stop()
        for path in sorted(tmp_path.glob("node-*.log")):
            sys.stderr.write(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}\n")
