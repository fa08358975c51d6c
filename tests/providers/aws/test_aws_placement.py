"""Gangs on AWS against moto: one cluster placement group per gang, EFA for EFA types only.

moto has no placement groups; ``PlacementGroupShim`` serves them as EC2 XML on
the same HTTP session (see ``aws_moto``). Instances, launch template versions,
subnets and DescribeInstanceTypes (EFA facts) are moto's own.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from aws_moto import CLUSTER, FleetShim, PlacementGroupShim, pick, request

from spotfleet.clock import FakeClock
from spotfleet.errors import InsufficientCapacity, NotOwned
from spotfleet.model.offering import Offering
from spotfleet.providers.aws import AwsProvider
from spotfleet.providers.base import TAG_CLUSTER, CloudState
from spotfleet.providers.gang_placement import GROUP_GRACE, TAG_PLACEMENT_GROUP


@pytest.fixture
def groups(session: boto3.Session, ec2: Any) -> PlacementGroupShim:
    return PlacementGroupShim(moto_ec2=ec2).install(session)


def template_data(ec2: Any, sent: dict[str, Any]) -> dict[str, Any]:
    """The launch template version a CreateFleet request launched (as moto stored it)."""
    spec = sent["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
    versions = ec2.describe_launch_template_versions(
        LaunchTemplateId=spec["LaunchTemplateId"], Versions=[str(spec["Version"])]
    )["LaunchTemplateVersions"]
    return dict(versions[0]["LaunchTemplateData"])


def launch_gang(provider: AwsProvider, offerings: list[Offering], group: str, nodes: int = 2) -> list[str]:
    ids = []
    for rank in range(nodes):
        [instance] = provider.launch(request(f"req-{group}-{rank}", offerings, placement_group=group))
        ids.append(instance.provider_id)
    return ids


def test_one_tagged_cluster_group_per_gang_and_every_member_launches_into_it(
    provider: AwsProvider, fleet: FleetShim, groups: PlacementGroupShim, subnets: dict[str, str], ec2: Any
) -> None:
    g5 = pick(provider, "g5.xlarge")
    ids = launch_gang(provider, g5, "pg-job-1-0", nodes=3)

    assert groups.created == ["pg-job-1-0"], "created once for the gang, reused by the other members"
    strategy, tags = groups.groups["pg-job-1-0"]
    assert strategy == "cluster"
    assert tags[TAG_CLUSTER] == CLUSTER and tags["team"] == "ml-platform"
    assert len(fleet.requests) == 3
    for sent in fleet.requests:
        # Only the primary pool, although alternatives in other zones were acceptable.
        assert sent["LaunchTemplateConfigs"][0]["Overrides"] == [
            {"InstanceType": "g5.xlarge", "SubnetId": subnets[g5[0].zone], "Placement": {"GroupName": "pg-job-1-0"}}
        ]
        assert "NetworkInterfaces" not in template_data(ec2, sent), "g5.xlarge has no EFA"
    assert sorted(groups.members("pg-job-1-0")) == sorted(ids)
    listed = {i.provider_id: i for i in provider.list_instances()}
    assert {listed[i].tags[TAG_PLACEMENT_GROUP] for i in ids} == {"pg-job-1-0"}


def test_a_launch_without_a_gang_creates_no_group(
    provider: AwsProvider, fleet: FleetShim, groups: PlacementGroupShim
) -> None:
    provider.launch(request("req-single", pick(provider, "g5.xlarge")[:2]))
    assert groups.created == []
    assert all("Placement" not in o for o in fleet.last["LaunchTemplateConfigs"][0]["Overrides"])
    assert len(fleet.last["LaunchTemplateConfigs"][0]["Overrides"]) == 2


@pytest.mark.parametrize(("instance_type", "interfaces"), [("p4d.24xlarge", 4), ("g5.48xlarge", 1)])
def test_efa_types_get_one_efa_interface_per_card_all_in_one_subnet(
    provider: AwsProvider,
    fleet: FleetShim,
    groups: PlacementGroupShim,
    subnets: dict[str, str],
    ec2: Any,
    instance_type: str,
    interfaces: int,
) -> None:
    offerings = pick(provider, instance_type)
    if not offerings:
        pytest.fail(f"no {instance_type} offering in the configured zones")
    launch_gang(provider, offerings, "pg-efa-0")

    for sent in fleet.requests:
        # The subnet travels in the interfaces: EC2 refuses it in the override too.
        assert sent["LaunchTemplateConfigs"][0]["Overrides"] == [
            {"InstanceType": instance_type, "Placement": {"GroupName": "pg-efa-0"}}
        ]
        nics = template_data(ec2, sent)["NetworkInterfaces"]
        assert len(nics) == interfaces
        assert {n["InterfaceType"] for n in nics} == {"efa"}
        assert {n["SubnetId"] for n in nics} == {subnets[offerings[0].zone]}
        assert [n["NetworkCardIndex"] for n in nics] == list(range(interfaces))
        assert [n["DeviceIndex"] for n in nics] == [0] + [1] * (interfaces - 1)


def test_a_group_is_deleted_once_the_gang_is_gone_and_not_before(
    provider: AwsProvider, groups: PlacementGroupShim, clock: FakeClock
) -> None:
    g5 = pick(provider, "g5.xlarge")
    ids = launch_gang(provider, g5, "pg-job-2-0")
    provider.placement_groups.ensure("us-east-1", "pg-job-3-0")  # a gang about to launch

    clock.advance(seconds=GROUP_GRACE.total_seconds() + 1)
    assert provider.collect_placement_groups("us-east-1", force=True) == ["pg-job-3-0"], "empty and old: deleted"
    assert "pg-job-2-0" in groups.groups, "members still running"

    provider.terminate(ids, request_id="terminate-gang")
    provider.launch(request("req-late", g5, placement_group="pg-job-4-0"))
    provider.terminate([provider.list_instances()[-1].provider_id], request_id="t")
    assert {i.state for i in provider.list_instances() if i.provider_id in ids} == {CloudState.TERMINATED}
    clock.advance(seconds=120)  # the listing collects at most once a minute
    provider.list_instances()
    assert groups.deleted == ["pg-job-3-0", "pg-job-2-0"], "pg-job-4-0 is empty but younger than the grace"


def test_a_same_named_group_of_someone_else_is_refused(
    provider: AwsProvider, fleet: FleetShim, groups: PlacementGroupShim
) -> None:
    groups.groups["pg-job-5-0"] = ("cluster", {TAG_CLUSTER: "another-cluster"})
    with pytest.raises(NotOwned):
        provider.launch(request("req-foreign", pick(provider, "g5.xlarge"), placement_group="pg-job-5-0"))
    assert fleet.requests == []


def test_a_restarted_provider_reuses_its_own_group(
    provider: AwsProvider, groups: PlacementGroupShim, session: boto3.Session, clock: FakeClock
) -> None:
    g5 = pick(provider, "g5.xlarge")
    provider.launch(request("req-a", g5, placement_group="pg-job-6-0"))
    again = AwsProvider(provider.config, cluster=CLUSTER, clock=clock, session=session)
    again.launch(request("req-b", g5, placement_group="pg-job-6-0"))
    assert groups.created == ["pg-job-6-0"]
    assert len(groups.members("pg-job-6-0")) == 2


def test_a_capacity_error_in_the_group_fails_the_member_for_that_pool_only_and_the_gang_moves(
    provider: AwsProvider, fleet: FleetShim, groups: PlacementGroupShim, clock: FakeClock
) -> None:
    g5 = pick(provider, "g5.xlarge")
    first, elsewhere = g5[0], g5[1]
    fleet.stocked_out[("g5.xlarge", first.zone)] = "InsufficientInstanceCapacity"

    with pytest.raises(InsufficientCapacity) as failed:
        provider.launch(request("req-g7-0", g5, placement_group="pg-job-7-0"))
    assert [o.key for o in failed.value.offerings] == [first.key], "names the gang's pool, nothing else"
    assert len(fleet.last["LaunchTemplateConfigs"][0]["Overrides"]) == 1, "never a member in another zone"

    # The planner marks that pool unavailable and requeues the whole gang: next
    # attempt, new group, another zone. Every member lands there.
    ids = launch_gang(provider, [elsewhere], "pg-job-7-1")
    assert {i.zone for i in provider.list_instances() if i.provider_id in ids} == {elsewhere.zone}
    assert groups.created == ["pg-job-7-0", "pg-job-7-1"]
    clock.advance(seconds=GROUP_GRACE.total_seconds() + 1)
    assert provider.collect_placement_groups("us-east-1", force=True) == ["pg-job-7-0"]


def test_offerings_carry_efa_from_describe_instance_types(provider: AwsProvider) -> None:
    """The interconnect comes from the API (moto's NetworkInfo), not the type name."""
    by_type = {o.instance_type: o.interconnect for o in provider.offerings()}
    assert by_type["p4d.24xlarge"] == "efa" and by_type["g5.48xlarge"] == "efa"
    assert by_type["g5.xlarge"] == "tcp"
