"""Gangs on GCP against the local Compute server: one compact placement policy per gang."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from spotfleet.clock import FakeClock
from spotfleet.errors import InsufficientCapacity, NotOwned
from spotfleet.model.offering import Offering
from spotfleet.providers.base import LaunchRequest
from spotfleet.providers.gang_placement import GROUP_GRACE, TAG_PLACEMENT_GROUP
from spotfleet.providers.gcp import GcpProvider
from spotfleet.providers.gcp_placement import policy_name
from tests.providers.gcp.gce_server import API, ApiError, FakeCompute
from tests.providers.gcp.gcp_support import CLUSTER, launch_request, offering_in

REGION = "us-central1"


def member(offering: Offering, group: str, rank: int, *, alternatives: tuple[Offering, ...] = ()) -> LaunchRequest:
    base = launch_request(offering, request_id=f"req-{group}-{rank}", alternatives=alternatives)
    return dataclasses.replace(base, placement_group=group)


def launch_gang(provider: GcpProvider, offering: Offering, group: str, nodes: int = 2) -> list[str]:
    return [provider.launch(member(offering, group, rank))[0].provider_id for rank in range(nodes)]


def test_one_compact_policy_per_gang_attached_to_every_member(provider: GcpProvider, gce: FakeCompute) -> None:
    a2 = offering_in(provider, "a2-highgpu-1g", "us-central1-a")
    launch_gang(provider, a2, "pg-job-1-0", nodes=3)

    name = policy_name(CLUSTER, "pg-job-1-0")
    assert len(gce.calls_to("POST", f"/regions/{REGION}/resourcePolicies")) == 1, "created once per gang"
    policy = gce.resource_policies[(REGION, name)]
    assert policy["groupPlacementPolicy"] == {"collocation": "COLLOCATED"}
    assert policy["description"].startswith(f"spotfleet:cluster={CLUSTER} ")
    inserts = gce.calls_to("POST", "/zones/us-central1-a/instances")
    assert len(inserts) == 3
    for call in inserts:
        assert call.body is not None
        assert call.body["resourcePolicies"] == [f"projects/{gce.project}/regions/{REGION}/resourcePolicies/{name}"]
    assert sorted(gce.policy_users(REGION, name)) == sorted(n for (_, n) in gce.instances)
    assert {i.tags[TAG_PLACEMENT_GROUP] for i in provider.list_instances()} == {"pg-job-1-0"}


def test_a_launch_without_a_gang_attaches_no_policy(provider: GcpProvider, gce: FakeCompute) -> None:
    provider.launch(launch_request(offering_in(provider, "a2-highgpu-1g", "us-central1-a")))
    assert gce.resource_policies == {}
    [call] = gce.calls_to("POST", "/zones/us-central1-a/instances")
    assert call.body is not None and "resourcePolicies" not in call.body


def test_the_server_refuses_an_unknown_policy_like_gce(provider: GcpProvider, gce: FakeCompute) -> None:
    """The local server's attach semantics, so the provider test above can fail."""
    body = {"name": "vm-x", "machineType": "zones/us-central1-a/machineTypes/a2-highgpu-1g",
            "resourcePolicies": [f"projects/{gce.project}/regions/{REGION}/resourcePolicies/nope"]}  # fmt: skip
    with pytest.raises(ApiError) as refused, gce.lock:
        gce.insert("us-central1-a", {}, body)
    assert refused.value.status == 400


def test_policies_are_deleted_once_unused_and_not_before(
    provider: GcpProvider, gce: FakeCompute, clock: FakeClock
) -> None:
    a2 = offering_in(provider, "a2-highgpu-1g", "us-central1-a")
    ids = launch_gang(provider, a2, "pg-job-2-0")
    provider.placement.ensure(REGION, "pg-job-3-0")  # a gang about to launch

    assert provider.collect_placement_policies(REGION, force=True) == [], "young and in use"
    clock.advance(seconds=GROUP_GRACE.total_seconds() + 1)
    assert provider.collect_placement_policies(REGION, force=True) == [policy_name(CLUSTER, "pg-job-3-0")]

    gce.preempt("us-central1-a", ids[0].split("/", 1)[1])
    with gce.lock:  # a stopped Spot VM keeps its policy: still in use
        for inst in gce.instances.values():
            inst["status"] = "TERMINATED"
    assert provider.collect_placement_policies(REGION, force=True) == []
    provider.terminate(ids, request_id="terminate-gang")
    clock.advance(seconds=120)
    provider.list_instances()
    assert (REGION, policy_name(CLUSTER, "pg-job-2-0")) not in gce.resource_policies


def test_a_policy_the_server_still_sees_in_use_is_kept_for_the_next_round(
    provider: GcpProvider, gce: FakeCompute, clock: FakeClock, make_provider: Callable[..., GcpProvider]
) -> None:
    """Another cluster's VMs are invisible to the listing; GCE's refusal protects them."""
    a2 = offering_in(provider, "a2-highgpu-1g", "us-central1-a")
    launch_gang(provider, a2, "pg-job-8-0", nodes=1)
    with gce.lock:
        for inst in gce.instances.values():
            inst["labels"] = {}  # not listed as ours any more
    clock.advance(seconds=GROUP_GRACE.total_seconds() + 1)
    assert provider.collect_placement_policies(REGION, force=True) == []
    assert (REGION, policy_name(CLUSTER, "pg-job-8-0")) in gce.resource_policies


def test_a_same_named_policy_of_another_owner_is_refused(provider: GcpProvider, gce: FakeCompute) -> None:
    name = policy_name(CLUSTER, "pg-job-5-0")
    gce.resource_policies[(REGION, name)] = {"name": name, "description": "made by hand",
                                             "selfLink": f"{API}/projects/{gce.project}/regions/{REGION}/resourcePolicies/{name}"}  # fmt: skip
    with pytest.raises(NotOwned):
        provider.launch(member(offering_in(provider, "a2-highgpu-1g", "us-central1-a"), "pg-job-5-0", 0))
    assert gce.calls_to("POST", "/zones/us-central1-a/instances") == []


def test_a_restarted_provider_reuses_its_own_policy(
    provider: GcpProvider, gce: FakeCompute, make_provider: Callable[..., GcpProvider]
) -> None:
    a2 = offering_in(provider, "a2-highgpu-1g", "us-central1-a")
    provider.launch(member(a2, "pg-job-6-0", 0))
    make_provider().launch(member(a2, "pg-job-6-0", 1))
    assert len(gce.resource_policies) == 1
    assert len(gce.policy_users(REGION, policy_name(CLUSTER, "pg-job-6-0"))) == 2


def test_a_stockout_for_a_gang_member_tries_no_other_zone_and_the_gang_moves(
    provider: GcpProvider, gce: FakeCompute, clock: FakeClock
) -> None:
    first = offering_in(provider, "a2-highgpu-1g", "us-central1-a")
    elsewhere = offering_in(provider, "a2-highgpu-1g", "us-central1-b")
    gce.stockout("us-central1-a")

    with pytest.raises(InsufficientCapacity) as failed:
        provider.launch(member(first, "pg-job-7-0", 0, alternatives=(elsewhere,)))
    assert [o.key for o in failed.value.offerings] == [first.key]
    assert gce.calls_to("POST", "/zones/us-central1-b/instances") == [], "never a member in another zone"

    ids = launch_gang(provider, elsewhere, "pg-job-7-1")  # the requeued gang, next attempt
    assert {i.split("/")[0] for i in ids} == {"us-central1-b"}
    clock.advance(seconds=GROUP_GRACE.total_seconds() + 1)
    assert provider.collect_placement_policies(REGION, force=True) == [policy_name(CLUSTER, "pg-job-7-0")]
