"""GCE failures arrive as typed errors; stockouts name exactly the offering."""

from __future__ import annotations

import pytest

from spotfleet.errors import (
    InstanceNotFound,
    InsufficientCapacity,
    PermanentError,
    QuotaExceeded,
    Throttled,
)
from spotfleet.providers.gcp import GcpProvider
from tests.providers.gcp.gce_server import ApiError, FakeCompute, quota_error, stockout_error, throttle_error
from tests.providers.gcp.gcp_support import launch_request, offering_in


@pytest.mark.parametrize("how", ["http", "operation"])
def test_stockout_names_exactly_that_offering(provider: GcpProvider, gce: FakeCompute, how: str) -> None:
    gce.stockout("us-central1-a", how=how)
    offering = offering_in(provider, "a3-highgpu-8g", "us-central1-a")
    with pytest.raises(InsufficientCapacity) as info:
        provider.launch(launch_request(offering))
    assert info.value.offerings == (offering,)
    assert not gce.instances


def test_multi_zone_launch_skips_the_stocked_out_zone(provider: GcpProvider, gce: FakeCompute) -> None:
    """us-central1-a answers stockouts; the next acceptable zone is used in the same call."""
    gce.stockout("us-central1-a", how="http")
    first = offering_in(provider, "a3-highgpu-8g", "us-central1-a")
    second = offering_in(provider, "a3-highgpu-8g", "us-central1-b")
    [inst] = provider.launch(launch_request(first, alternatives=(second,)))
    assert inst.zone == "us-central1-b"
    assert [c.path.split("/")[6] for c in gce.calls_to("POST", "/instances")] == [
        "us-central1-a",
        "us-central1-b",
    ]


def test_all_zones_out_names_every_offering_tried(provider: GcpProvider, gce: FakeCompute) -> None:
    gce.stockout("us-central1-a", how="http")
    gce.stockout("us-east4-a", how="operation")
    first = offering_in(provider, "a3-highgpu-8g", "us-central1-a")
    second = offering_in(provider, "a3-highgpu-8g", "us-east4-a")
    with pytest.raises(InsufficientCapacity) as info:
        provider.launch(launch_request(first, alternatives=(second,)))
    assert info.value.offerings == (first, second)
    assert "us-central1-a" in str(info.value) and "us-east4-a" in str(info.value)


@pytest.mark.parametrize(
    "fault",
    [
        quota_error(),
        (
            "QUOTA_EXCEEDED",
            403,
            "Quota 'NVIDIA_H100_GPUS' exceeded. Limit: 0.0 in region us-central1.",
        ),
    ],
    ids=["http", "operation"],
)
def test_quota_exceeded(provider: GcpProvider, gce: FakeCompute, fault: ApiError | tuple[str, int, str]) -> None:
    gce.fail_next("instances.insert", fault)
    second = offering_in(provider, "a3-highgpu-8g", "us-central1-b")
    with pytest.raises(QuotaExceeded, match="exceeded"):
        provider.launch(launch_request(offering_in(provider, "a3-highgpu-8g", "us-central1-a"), alternatives=(second,)))
    assert len(gce.calls_to("POST", "/instances")) == 1  # quota is not a reason to spray other zones


def test_rate_limit_is_throttled_with_retry_after(provider: GcpProvider, gce: FakeCompute) -> None:
    gce.fail_next("instances.insert", throttle_error(retry_after=7))
    with pytest.raises(Throttled) as info:
        provider.launch(launch_request(offering_in(provider, "g2-standard-4", "us-central1-a")))
    assert info.value.retry_after == 7


def test_backend_error_is_transient_not_permanent(provider: GcpProvider, gce: FakeCompute) -> None:
    gce.fail_next("instances.list", ApiError(503, "backendError", "Internal error. Please try again."))
    with pytest.raises(Throttled):
        provider.list_instances()
    assert len(gce.calls_to("GET", "/zones/us-central1-a/instances")) == 1  # no hidden retry loop


def test_stockout_reason_outside_launch_is_not_capacity(provider: GcpProvider, gce: FakeCompute) -> None:
    gce.fail_next("instances.list", stockout_error())
    with pytest.raises(PermanentError):
        provider.list_instances()


def test_invalid_request_is_permanent(provider: GcpProvider, gce: FakeCompute) -> None:
    offering = offering_in(provider, "a2-highgpu-1g", "us-central1-a")
    gce.machine_types["us-central1-a"] = ("g2-standard-4",)  # the type vanished after offerings were read
    with pytest.raises(PermanentError, match="does not exist"):
        provider.launch(launch_request(offering))


def test_get_unknown_is_instance_not_found(provider: GcpProvider) -> None:
    with pytest.raises(InstanceNotFound) as info:
        provider.get("us-central1-a/sf-nope")
    assert info.value.instance_id == "us-central1-a/sf-nope"
    with pytest.raises(InstanceNotFound):
        provider.get("not-a-gcp-id")


def test_operation_resource_not_found_maps_to_instance_not_found(provider: GcpProvider, gce: FakeCompute) -> None:
    [inst] = provider.launch(launch_request(offering_in(provider, "g2-standard-4", "us-central1-a")))
    gce.fail_next("instances.get", ApiError(404, "notFound", "The resource was not found"))
    with pytest.raises(InstanceNotFound):
        provider.get(inst.provider_id)
