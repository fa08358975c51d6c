"""terraform apply of ``terraform/examples/aws`` on moto, and a controller driven by its outputs.

1. A VPC with two subnets stands in for the account's existing network (the
   example takes ``vpc_id`` and subnets as inputs; it creates no VPC).
2. ``terraform apply`` of a copy of the example, unchanged except for one
   test-only ``moto_override.tf`` (provider endpoints → the moto server, fake
   keys, skip_credentials_validation / skip_requesting_account_id /
   skip_metadata_api_check, s3_use_path_style). The module is applied as
   written; the checks below read what moto now holds.
3. ``terraform output -json`` → ``spotfleet config from-terraform`` → the
   controller config. The test process plays the controller instance: it runs
   the real ``Service`` with that config, adding only what points it at moto
   (``endpoint_url``, catalog on-demand prices) and listening on a free
   loopback port instead of the controller's private address.
4. A job is submitted; the AWS provider launches a spot instance on moto from
   the applied launch template; the test boots it (an agent from the user data
   of the launch's template version, an emulated IMDSv2).
5. The interruption arrives only through the applied path: an "EC2 Spot Instance
   Interruption Warning" put on EventBridge (PutEvents) matches the applied
   rule, whose target is the applied queue, which the controller polls. IMDS is
   not told, so the notice can only have come that way. The job drains with a
   checkpoint and resumes on a replacement; idle, the replacement is given back.
6. ``terraform destroy``: state empty; moto holds none of the module's resources.

moto gaps, handled in the moto server (``moto_server.py``), not the module:
``MonitorInstances`` is not implemented (the controller has ``monitoring =
true``), and terminating an instance leaves its ``delete_on_termination =
false`` ENI attached (the controller's ENI could not be destroyed). moto does
not evaluate IAM policies or the queue policy: they are created and read back,
not enforced.

Run with ``-s`` to see the timeline.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.moto_process import moto_server as running_moto
from tests.terraform.tf import Workspace, mirror_versions, require_terraform, workspace

AWS_TESTS = Path(__file__).resolve().parents[1] / "providers" / "aws"
if str(AWS_TESTS) not in sys.path:
    sys.path.insert(0, str(AWS_TESTS))

from aws_moto import AMI, CatalogPrices, FleetShim  # noqa: E402
from test_aws_e2e import RecordingAwsProvider, boot_node, provisioned, wait_for  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REGION = "us-east-1"
CLUSTER = "tfe2e"
EXAMPLE = "examples/aws"
# Every endpoint the module's resources and data sources use.
SERVICES = ("ec2", "events", "iam", "sqs", "ssm", "sts")


@dataclass
class Timeline:
    start: float = field(default_factory=time.monotonic)
    phases: list[tuple[str, float, float]] = field(default_factory=list)
    _last: float = 0.0

    def mark(self, phase: str) -> None:
        now = time.monotonic() - self.start
        self.phases.append((phase, self._last, now))
        self._last = now

    def render(self) -> str:
        rows = [f"{'phase':<74} {'start':>7} {'took':>7}"]
        rows += [f"{name:<74} {t0:>6.1f}s {t1 - t0:>6.1f}s" for name, t0, t1 in self.phases]
        rows.append(f"{'total':<74} {'':>7} {self._last:>6.1f}s")
        return "\n".join(rows)


def override_tf(endpoint: str) -> str:
    endpoints = "\n".join(f'    {svc:<6} = "{endpoint}"' for svc in SERVICES)
    return f"""# Test only: this provider block is merged into the example's (terraform
# override file), pointing it at the moto server with fake credentials.
provider "aws" {{
  access_key                  = "testing"
  secret_key                  = "testing"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  s3_use_path_style           = true
  max_retries                 = 2

  endpoints {{
{endpoints}
  }}
}}
"""


@pytest.fixture
def moto_server(tmp_path: Path) -> Iterator[str]:
    """moto behind the gap-filling wrapper (``moto_server.py``), its output in moto.log."""
    with running_moto([str(Path(__file__).with_name("moto_server.py"))], log=tmp_path / "moto.log") as url:
        yield url


@pytest.fixture
def timeline() -> Iterator[Timeline]:
    """Phase times, printed at the end (pass or fail; shown with -s)."""
    recorded = Timeline()
    yield recorded
    print("\nterraform apply on moto: timeline\n" + recorded.render())


@pytest.fixture
def agents() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def tags_of(item: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags", item.get("tags", []))}


def module_resources(ws: Workspace) -> list[str]:
    return ws.run(EXAMPLE, "state", "list").stdout.split()


def test_apply_example_on_moto_then_run_a_controller_from_its_outputs(
    moto_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agents: list[subprocess.Popen[bytes]],
    timeline: Timeline,
) -> None:
    _, mirror = require_terraform()
    ws = workspace(tmp_path / "ws", mirror)
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)
    ec2 = session.client("ec2", endpoint_url=moto_server)
    sqs = session.client("sqs", endpoint_url=moto_server)
    events = session.client("events", endpoint_url=moto_server)
    iam = session.client("iam", endpoint_url=moto_server)

    # 1. the account's existing network
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    zones = ["us-east-1a", "us-east-1b"]
    subnets = {
        zone: ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.42.{i}.0/24", AvailabilityZone=zone)["Subnet"]["SubnetId"]
        for i, zone in enumerate(zones)
    }
    (ws.dir(EXAMPLE) / "moto_override.tf").write_text(override_tf(moto_server))
    (ws.dir(EXAMPLE) / "terraform.tfvars").write_text(
        f'cluster              = "{CLUSTER}"\n'
        f'vpc_id               = "{vpc}"\n'
        f'controller_subnet_id = "{subnets[zones[0]]}"\n'
        f"worker_subnets       = {json.dumps({z: [s] for z, s in subnets.items()})}\n"
        f'worker_ami_id        = "{AMI}"\n'
        f'api_token_parameter  = "/spotfleet/{CLUSTER}/api-token"\n'
        'api_allowed_cidrs    = ["10.8.0.0/16"]\n'
    )
    timeline.mark("network (VPC + 2 subnets, boto3) and workspace copy")

    # 2. init + apply
    ws.init(EXAMPLE, backend=True)
    lock = (ws.dir(EXAMPLE) / ".terraform.lock.hcl").read_text()
    [used] = re.findall(r'version\s+=\s+"([^"]+)"', lock)
    assert used in mirror_versions(mirror)
    timeline.mark(f"terraform init (hashicorp/aws {used} from {mirror})")
    applied = ws.run(EXAMPLE, "apply", "-auto-approve", "-no-color", timeout=400)
    added = re.search(r"Apply complete! Resources: (\d+) added, 0 changed, 0 destroyed", applied.stdout)
    assert added, applied.stdout
    timeline.mark(f"terraform apply ({added.group(1)} resources)")

    state = module_resources(ws)
    created = sorted({re.sub(r"\[.*\]$", "", a).removeprefix("module.spotfleet.") for a in state})
    print(f"\nterraform state ({len(state)} addresses):\n  " + "\n  ".join(state))
    for expected in (
        "aws_security_group.controller", "aws_security_group.worker", "aws_network_interface.controller",
        "aws_vpc_security_group_ingress_rule.controller_api_from_workers", "aws_launch_template.worker",
        "aws_iam_role.controller", "aws_iam_role.worker", "aws_iam_instance_profile.controller",
        "aws_iam_instance_profile.worker", "aws_iam_role_policy.controller_provider",
        "aws_iam_role_policy.controller_boot", "aws_iam_role_policy_attachment.controller_session_manager",
        "aws_sqs_queue.events", "aws_sqs_queue.events_dlq", "aws_sqs_queue_policy.events",
        "aws_cloudwatch_event_rule.events", "aws_cloudwatch_event_target.events", "aws_instance.controller",
    ):  # fmt: skip
        assert expected in created, f"{expected} not in state"
    outputs = json.loads(ws.run(EXAMPLE, "output", "-json").stdout)
    config_out = outputs["spotfleet_config"]["value"]
    aws_out = config_out["providers"]["aws"]

    # What moto now holds, read back through the AWS APIs.
    groups = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]
    by_name = {g["GroupName"]: g for g in groups}
    worker_sg = by_name[f"spotfleet-{CLUSTER}-worker"]
    controller_sg = by_name[f"spotfleet-{CLUSTER}-controller"]
    assert tags_of(worker_sg)["spotfleet:cluster"] == CLUSTER and aws_out["security_group_ids"] == [
        worker_sg["GroupId"]
    ]
    rules = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [controller_sg["GroupId"]]}])
    api_from_workers = [
        r for r in rules["SecurityGroupRules"]
        if not r["IsEgress"] and r.get("ReferencedGroupInfo", {}).get("GroupId") == worker_sg["GroupId"]
    ]  # fmt: skip
    assert api_from_workers and api_from_workers[0]["FromPort"] == 8478
    [template] = ec2.describe_launch_templates(LaunchTemplateNames=[aws_out["launch_template_name"]])["LaunchTemplates"]
    [default] = ec2.describe_launch_template_versions(
        LaunchTemplateId=template["LaunchTemplateId"], Versions=["$Default"]
    )["LaunchTemplateVersions"]
    lt_data = default["LaunchTemplateData"]
    assert lt_data["ImageId"] == AMI and lt_data["MetadataOptions"]["HttpTokens"] == "required"
    assert lt_data["IamInstanceProfile"]["Arn"] == aws_out["instance_profile"]
    assert lt_data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    controller_role = iam.get_role(RoleName=f"spotfleet-{CLUSTER}-controller")["Role"]
    assert sorted(iam.list_role_policies(RoleName=controller_role["RoleName"])["PolicyNames"]) == [
        "spotfleet-controller-boot",
        "spotfleet-provider",
    ]
    provider_policy = iam.get_role_policy(RoleName=controller_role["RoleName"], PolicyName="spotfleet-provider")
    document = provider_policy["PolicyDocument"]
    document = json.loads(document) if isinstance(document, str) else document
    actions = {
        a for s in document["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    from spotfleet.providers.aws_iam import REQUIRED_IAM_ACTIONS

    assert actions == set(REQUIRED_IAM_ACTIONS)
    attached = iam.list_attached_role_policies(RoleName=controller_role["RoleName"])["AttachedPolicies"]
    assert [p["PolicyName"] for p in attached] == ["AmazonSSMManagedInstanceCore"]
    profile = iam.get_instance_profile(InstanceProfileName=f"spotfleet-{CLUSTER}-worker")["InstanceProfile"]
    assert (
        profile["Arn"] == aws_out["instance_profile"]
        and profile["Roles"][0]["RoleName"] == f"spotfleet-{CLUSTER}-worker"
    )
    queue_url = aws_out["sqs_queue_url"]
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert attrs["SqsManagedSseEnabled"] == "true" and "deadLetterTargetArn" in attrs["RedrivePolicy"]
    assert "events.amazonaws.com" in attrs["Policy"]
    rule_names = sorted(r["Name"] for r in events.list_rules(NamePrefix=f"spotfleet-{CLUSTER}-")["Rules"])
    assert rule_names == [f"spotfleet-{CLUSTER}-{k}" for k in ("health", "rebalance", "spot", "state")]
    [target] = events.list_targets_by_rule(Rule=f"spotfleet-{CLUSTER}-spot")["Targets"]
    assert target["Arn"] == attrs["QueueArn"]
    [controller] = [
        i
        for r in ec2.describe_instances(InstanceIds=[outputs["controller_instance_id"]["value"]])["Reservations"]
        for i in r["Instances"]
    ]
    assert controller["State"]["Name"] == "running" and "spotfleet:cluster" not in tags_of(controller)
    assert controller["MetadataOptions"]["HttpTokens"] == "required" and controller["Monitoring"]["State"] == "enabled"
    timeline.mark("read back what moto holds (SGs, rules, LT, IAM, SQS, rules, controller)")

    # 3. terraform output -json → spotfleet config from-terraform
    (tmp_path / "outputs.json").write_text(json.dumps(outputs))
    spotfleet = Path(sys.executable).with_name("spotfleet")
    generated = tmp_path / "spotfleet.yaml"
    cli = subprocess.run(
        [str(spotfleet), "config", "from-terraform", str(tmp_path / "outputs.json"), "-o", str(generated)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    config_data = yaml.safe_load(generated.read_text())
    assert config_data["providers"]["aws"]["launch_template_name"] == f"spotfleet-{CLUSTER}-worker"
    assert config_data["providers"]["aws"]["sqs_queue_url"] == queue_url
    assert config_data["providers"]["aws"]["subnets"] == {z: [s] for z, s in subnets.items()}
    # The test process is the controller instance: moto instead of AWS, a free
    # loopback port instead of the ENI's address, test-speed reconcile.
    config_data["providers"]["aws"].update(
        endpoint_url=moto_server, on_demand_price_source="catalog", sqs_wait_seconds=0, retry_mode="standard",
        max_attempts=2,
    )  # fmt: skip
    config_data["api"] = {"port": 0}
    config_data["reconcile"] = {"interval": "0.5s", "idle_ttl": "2s", "heartbeat": "0.5s"}
    config_data["data_dir"] = str(tmp_path / "controller")
    config_data["checkpoint_root"] = str(tmp_path / "checkpoints")
    controller_yaml = tmp_path / "controller.yaml"
    controller_yaml.write_text(yaml.safe_dump(config_data))
    timeline.mark("terraform output -json → spotfleet config from-terraform")

    from spotfleet.clock import SystemClock
    from spotfleet.config import load_config
    from spotfleet.metadata import AwsImdsServer
    from spotfleet.model.events import NoticeKind
    from spotfleet.model.job import JobState
    from spotfleet.model.spec import parse_spec
    from spotfleet.providers import registry
    from spotfleet.providers.aws_config import AwsProviderConfig
    from spotfleet.providers.aws_events import SPOT_WARNING
    from spotfleet.providers.base import TAG_CLUSTER
    from spotfleet.service import Service

    for var in ("SPOTFLEET_DATABASE", "SPOTFLEET_DATA_DIR", "SPOTFLEET_API_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    zone_ids = {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    prices = CatalogPrices(zone_ids=zone_ids, now=SystemClock().now())
    session.events.register("before-send.ec2.DescribeSpotPriceHistory", prices)
    fleet = FleetShim(subnet_zone={s: z for z, s in subnets.items()}).install(session)
    built: list[RecordingAwsProvider] = []

    def aws_factory(options: dict[str, Any], *, cluster: str, clock: Any, **_: Any) -> RecordingAwsProvider:
        # The provider section exactly as generated (plus the moto settings above);
        # the session only carries the price/fleet shims of the AWS provider tests.
        provider = RecordingAwsProvider(AwsProviderConfig.model_validate(dict(options)), cluster=cluster, clock=clock,
                                        session=session)  # fmt: skip
        built.append(provider)
        return provider

    monkeypatch.setitem(registry.FACTORIES, "aws", aws_factory)
    config = load_config(controller_yaml)
    assert config.cluster == CLUSTER
    service = Service(config)
    servers: list[AwsImdsServer] = []
    service.start_background()
    try:
        [provider] = built
        store = service.store

        def play(instance: Any, name: str) -> None:
            imds, agent = boot_node(ec2, fleet, instance, tmp_path / name, cluster=CLUSTER)
            servers.append(imds)
            agents.append(agent)

        spec = parse_spec({
            "name": "tf-e2e-train", "priority": "opportunistic",
            "resources": {"gpus": 1, "gpu_types": ["A10G"]},
            "command": [sys.executable, "-m", "spotfleet.demo_job", "--steps", "200", "--step-seconds", "0.05",
                        "--checkpoint-every", "20"],
            "checkpoint": {"interval": "60s"},
        })  # fmt: skip
        job = service.controller.submit(spec)
        timeline.mark("controller started from the generated config; job submitted")

        # 4. launched on moto from the applied launch template
        first = wait_for("the first instance", lambda: provisioned(store, set()))
        sent = next(r for r in fleet.requests if r["ClientToken"] == first.request_id)
        lt_spec = sent["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
        assert lt_spec["LaunchTemplateId"] == template["LaunchTemplateId"], sent
        [version] = ec2.describe_launch_template_versions(
            LaunchTemplateId=template["LaunchTemplateId"], Versions=[str(lt_spec["Version"])]
        )["LaunchTemplateVersions"]
        # The launch's version is the applied default plus this launch's user data.
        assert version["LaunchTemplateData"]["IamInstanceProfile"] == lt_data["IamInstanceProfile"]
        assert version["LaunchTemplateData"]["MetadataOptions"]["HttpTokens"] == "required"
        [cloud] = [
            i for r in ec2.describe_instances(InstanceIds=[first.provider_id])["Reservations"] for i in r["Instances"]
        ]
        assert tags_of(cloud)[TAG_CLUSTER] == CLUSTER and cloud.get("InstanceLifecycle") == "spot"
        assert cloud["SubnetId"] in subnets.values() and cloud["ImageId"] == AMI
        timeline.mark(
            f"spot {cloud['InstanceType']} {first.provider_id} launched from {template['LaunchTemplateName']}"
        )
        play(first, "node-1")
        wait_for("a checkpoint", lambda: (store.get_job(job.id).progress.get("step") or 0) >= 30)
        timeline.mark("agent booted from the user data; job past its first checkpoints")

        # 5. the interruption, through the applied EventBridge rule → SQS queue only
        events.put_events(Entries=[{
            "Source": "aws.ec2", "DetailType": SPOT_WARNING,
            "Resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{first.provider_id}"],
            "Detail": json.dumps({"instance-id": first.provider_id, "instance-action": "terminate"}),
        }])  # fmt: skip
        wait_for("the EventBridge notice on the applied queue", lambda: any(
            e.provider_instance_id == first.provider_id and e.kind is NoticeKind.SPOT_INTERRUPTION
            for e in getattr(provider, "polled", [])
        ))  # fmt: skip
        timeline.mark("PutEvents → applied rule → applied SQS queue → controller")
        second = wait_for("a replacement instance", lambda: provisioned(store, {first.id}), timeout=60)
        assert second.provider_id != first.provider_id
        play(second, "node-2")
        done = wait_for("the job to finish", lambda: (j := store.get_job(job.id)).terminal and j, timeout=90)
        assert done.state is JobState.SUCCEEDED, done.message
        assert done.interruptions >= 1 and done.attempt == 2
        assert [(a["attempt"], a["instance_id"]) for a in store.job_attempts(job.id)] == [(1, first.id), (2, second.id)]
        log = service.controller.logs(job.id)
        checkpointed = re.search(r"checkpointed at step (\d+); exiting to be resumed", log)
        assert checkpointed, log
        assert f"attempt 2: starting at step {checkpointed.group(1)} of 200" in log
        timeline.mark(f"drained at step {checkpointed.group(1)}, resumed on {second.provider_id}, finished")

        def all_gone() -> bool:
            pages = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [CLUSTER]}])
            states = [i["State"]["Name"] for r in pages["Reservations"] for i in r["Instances"]]
            return len(states) >= 2 and all(s in ("shutting-down", "terminated") for s in states)

        wait_for("every worker terminated in moto", all_gone, timeout=30)
        timeline.mark("idle replacement given back (workers terminated)")
    except BaseException:
        for record in reversed(service.store.events(limit=80)):
            sys.stderr.write(f"{record.at:%H:%M:%S} {record.kind}: {record.message}\n")
        raise
    finally:
        service.stop()
        for server in servers:
            server.stop()
        for path in sorted(tmp_path.glob("node-*.log")):
            sys.stderr.write(f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}\n")

    # 6. terraform destroy leaves nothing
    shown = json.loads(ws.run(EXAMPLE, "show", "-json").stdout)
    module_ids = {
        str(r["values"]["id"])
        for m in shown["values"]["root_module"].get("child_modules", [])
        for r in m["resources"]
        if r["mode"] == "managed" and r["values"].get("id")
    }
    assert len(module_ids) >= 25
    destroyed = ws.run(EXAMPLE, "destroy", "-auto-approve", "-no-color", timeout=400)
    assert f"Destroy complete! Resources: {added.group(1)} destroyed." in destroyed.stdout, destroyed.stdout[-3000:]
    assert module_resources(ws) == []
    timeline.mark("terraform destroy")
    left = {
        "security groups": [
            g["GroupName"]
            for g in ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["SecurityGroups"]
            if g["GroupName"] != "default"
        ],
        # (moto keeps the workers' primary interfaces, which EC2 deletes with the instance)
        "controller network interface": [
            n["NetworkInterfaceId"]
            for n in ec2.describe_network_interfaces(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["NetworkInterfaces"]
            if n["NetworkInterfaceId"] in module_ids or n.get("Description", "").startswith("spotfleet")
        ],
        "launch templates": [t["LaunchTemplateName"] for t in ec2.describe_launch_templates()["LaunchTemplates"]],
        "instances not terminated": [
            i["InstanceId"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        ],
        "IAM roles": [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"].startswith("spotfleet-")],
        "instance profiles": [p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]],
        "SQS queues": sqs.list_queues().get("QueueUrls", []),
        "EventBridge rules": [r["Name"] for r in events.list_rules()["Rules"]],
    }
    assert all(not v for v in left.values()), left
    tagging = session.client("resourcegroupstaggingapi", endpoint_url=moto_server)
    tagged = tagging.get_resources(TagFilters=[{"Key": "spotfleet:cluster", "Values": [CLUSTER]}])
    still = [
        m["ResourceARN"] for m in tagged["ResourceTagMappingList"] if any(i in m["ResourceARN"] for i in module_ids)
    ]
    assert still == [], still
    timeline.mark("checked moto: nothing the module created is left")
