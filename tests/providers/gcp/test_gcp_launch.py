"""Launching Spot VMs through the real client against the local Compute server."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from spotfleet.model.offering import Market
from spotfleet.providers.base import TAG_CLUSTER, TAG_INSTANCE_ID, TAG_REQUEST_ID, CloudState
from spotfleet.providers.gcp import GcpProvider
from spotfleet.providers.gcp_config import N1GpuShape
from tests.providers.gcp.gce_server import FakeCompute
from tests.providers.gcp.gcp_support import CLUSTER, launch_request, offering_in


def _metadata(body: dict) -> dict[str, str]:
    return {i["key"]: i["value"] for i in body["metadata"]["items"]}


def test_launch_one_spot_vm_sends_the_full_instance_shape(provider: GcpProvider, gce: FakeCompute) -> None:
    offering = offering_in(provider, "a2-highgpu-1g", "us-central1-a")
    [inst] = provider.launch(launch_request(offering))

    assert inst.provider == "gcp"
    assert inst.provider_id.startswith("us-central1-a/sf-")
    assert (inst.instance_type, inst.zone, inst.region) == (
        "a2-highgpu-1g",
        "us-central1-a",
        "us-central1",
    )
    assert inst.market is Market.SPOT and inst.state is CloudState.RUNNING
    assert inst.tags[TAG_CLUSTER] == CLUSTER and inst.request_id == "req-01HZX3K5"
    assert inst.spotfleet_id == "i-Node/7"  # exact value back, though labels cannot hold it
    assert inst.address and inst.launched_at is not None

    [call] = gce.calls_to("POST", "/zones/us-central1-a/instances")
    body = call.body
    assert body is not None
    assert str(uuid.UUID(call.query["requestId"])) == call.query["requestId"]
    assert body["machineType"] == "zones/us-central1-a/machineTypes/a2-highgpu-1g"
    assert body["scheduling"] == {
        "provisioningModel": "SPOT",
        "instanceTerminationAction": "DELETE",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }
    assert body["shieldedInstanceConfig"] == {
        "enableSecureBoot": True,
        "enableVtpm": True,
        "enableIntegrityMonitoring": True,
    }
    labels = body["labels"]
    assert labels["spotfleet-cluster"] == CLUSTER and labels["team"] == "ml"
    assert labels["spotfleet-request-id"] == "req-01hzx3k5-" + labels["spotfleet-request-id"][-8:]
    assert all(k == k.lower() and len(v) <= 63 for k, v in labels.items())
    meta = _metadata(body)
    assert meta["block-project-ssh-keys"] == "TRUE"
    assert "controller_url: https://controller.internal:8443" in meta["startup-script"]
    assert "metadata: gcp" in meta["startup-script"]
    assert body["serviceAccounts"][0]["email"] == "spotfleet-node@test-project.iam.gserviceaccount.com"
    disk = body["disks"][0]
    assert disk["boot"] and disk["autoDelete"] and disk["initializeParams"]["diskType"].endswith("/pd-balanced")
    assert "guestAccelerators" not in body  # A2 carries its GPUs in the machine type


def test_launch_is_idempotent_per_request_id(provider: GcpProvider, gce: FakeCompute) -> None:
    offering = offering_in(provider, "g2-standard-4", "us-central1-b")
    first = provider.launch(launch_request(offering))
    again = provider.launch(launch_request(offering))
    assert [i.provider_id for i in again] == [i.provider_id for i in first]
    assert len(gce.calls_to("POST", "/instances")) == 1
    assert len(gce.instances) == 1


def test_gce_request_id_dedupes_a_retry_that_missed_the_label_list(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute
) -> None:
    """A crash after insert, and a list that does not show the VM yet: GCE's requestId saves us."""
    offering = offering_in(make_provider(), "g2-standard-4", "us-central1-a")
    make_provider().launch(launch_request(offering))
    gce.stale_lists = 1  # eventual consistency: the next list misses the new VM
    again = make_provider().launch(launch_request(offering))
    assert len(gce.instances) == 1
    assert len(again) == 1
    inserts = gce.calls_to("POST", "/zones/us-central1-a/instances")
    assert len(inserts) == 2 and inserts[0].query["requestId"] == inserts[1].query["requestId"]


def test_bulk_launch_uses_bulk_insert_and_lists_through_pages(provider: GcpProvider, gce: FakeCompute) -> None:
    gce.page_size = 2
    offering = offering_in(provider, "a3-highgpu-8g", "us-east4-a")
    instances = provider.launch(launch_request(offering, count=5))
    assert len(instances) == 5
    assert len({i.provider_id for i in instances}) == 5
    [bulk] = gce.calls_to("POST", "/zones/us-east4-a/instances/bulkInsert")
    assert bulk.body is not None
    assert bulk.body["count"] == "5" and bulk.body["minCount"] == "1"
    assert bulk.body["namePattern"].endswith("-###")
    props = bulk.body["instanceProperties"]
    assert props["machineType"] == "a3-highgpu-8g"  # bare names in InstanceProperties
    assert props["scheduling"]["provisioningModel"] == "SPOT"
    lists = [c for c in gce.calls_to("GET", "/zones/us-east4-a/instances") if "pageToken" in c.query]
    assert lists, "the provider must follow nextPageToken"


def test_on_demand_launch_is_standard_without_termination_action(provider: GcpProvider, gce: FakeCompute) -> None:
    offering = offering_in(provider, "g2-standard-8", "us-central1-a", Market.ON_DEMAND)
    [inst] = provider.launch(launch_request(offering))
    assert inst.market is Market.ON_DEMAND
    [call] = gce.calls_to("POST", "/instances")
    assert call.body is not None
    assert call.body["scheduling"] == {
        "provisioningModel": "STANDARD",
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
    }


def test_stop_action_and_max_run_duration(make_provider: Callable[..., GcpProvider], gce: FakeCompute) -> None:
    provider = make_provider(termination_action="STOP", max_run_duration="6h")
    provider.launch(launch_request(offering_in(provider, "g2-standard-4", "us-central1-a")))
    [call] = gce.calls_to("POST", "/instances")
    assert call.body is not None
    assert call.body["scheduling"]["instanceTerminationAction"] == "STOP"
    assert call.body["scheduling"]["maxRunDuration"] == {"seconds": "21600"}


def test_n1_shape_attaches_guest_accelerators(make_provider: Callable[..., GcpProvider], gce: FakeCompute) -> None:
    shape = N1GpuShape(
        machine_type="n1-standard-8",
        accelerator="nvidia-tesla-t4",
        count=1,
        on_demand_price=0.73,
        spot_price=0.19,
    )
    provider = make_provider(n1_gpus=[shape])
    offering = offering_in(provider, "n1-standard-8+1xnvidia-tesla-t4", "us-central1-a")
    assert (offering.gpu, offering.gpu_count, offering.vcpus, offering.memory_gib) == (
        "T4",
        1,
        8.0,
        30.0,
    )
    offering = dataclasses.replace(offering, extra=(("stale", "x"),))  # the type alone must say it all
    [inst] = provider.launch(launch_request(offering))
    assert inst.instance_type == "n1-standard-8+1xnvidia-tesla-t4"
    [call] = gce.calls_to("POST", "/instances")
    assert call.body is not None
    assert call.body["machineType"] == "zones/us-central1-a/machineTypes/n1-standard-8"
    assert call.body["guestAccelerators"] == [
        {
            "acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
            "acceleratorCount": 1,
        }
    ]


def test_waits_on_zone_operations_with_the_same_endpoint(provider: GcpProvider, gce: FakeCompute) -> None:
    gce.operation_polls_before_done = 2
    [inst] = provider.launch(launch_request(offering_in(provider, "g2-standard-4", "us-central1-a")))
    assert inst.state is CloudState.RUNNING
    waits = gce.calls_to("POST", "/wait")
    assert len(waits) == 2 and "/zones/us-central1-a/operations/" in waits[0].path


def test_unfinished_operation_returns_a_pending_instance(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute
) -> None:
    provider = make_provider(operation_wait_rounds=1)
    gce.operation_polls_before_done = 5
    gce.fail_next("instances.insert", ("ZONE_RESOURCE_POOL_EXHAUSTED", 503, "later"))  # decided, not yet reported
    [inst] = provider.launch(launch_request(offering_in(provider, "g2-standard-4", "us-central1-a")))
    assert inst.state is CloudState.PENDING
    assert inst.provider_id.startswith("us-central1-a/sf-")
    assert inst.tags[TAG_REQUEST_ID] == "req-01HZX3K5" and inst.tags[TAG_INSTANCE_ID] == "i-Node/7"


def test_unfinished_bulk_returns_pending_instances_named_like_bulk_insert(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute
) -> None:
    provider = make_provider(operation_wait_rounds=1)
    offering = offering_in(provider, "g2-standard-8", "us-central1-b")
    gce.operation_polls_before_done = 5
    gce.stale_lists = 2  # the idempotency lookup and the post-launch list both miss the new VMs
    pending = provider.launch(launch_request(offering, count=3))
    assert [i.state for i in pending] == [CloudState.PENDING] * 3
    assert sorted(i.provider_id for i in pending) == sorted(i.provider_id for i in provider.list_instances())
