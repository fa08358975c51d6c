"""list / get / terminate: filtered by the ownership label, paginated, across zones."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spotfleet.errors import InstanceNotFound, NotOwned
from spotfleet.providers.base import TAG_CLUSTER, CloudState
from spotfleet.providers.gcp import GcpProvider
from tests.providers.gcp.gce_server import FakeCompute
from tests.providers.gcp.gcp_support import CLUSTER, launch_request, offering_in


def _launch(provider: GcpProvider, zone: str, request_id: str, count: int = 1) -> list[str]:
    offering = offering_in(provider, "g2-standard-4", zone)
    return [i.provider_id for i in provider.launch(launch_request(offering, request_id=request_id, count=count))]


def test_list_spans_zones_follows_pages_and_skips_foreign(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute
) -> None:
    provider = make_provider()
    ours = _launch(provider, "us-central1-a", "r1", count=3) + _launch(provider, "us-east4-a", "r2")
    other_cluster = make_provider(cluster="someone-else")
    _launch(other_cluster, "us-central1-a", "r3")
    gce.add_foreign_instance("us-central1-a", "hand-made-vm")
    gce.add_foreign_instance("us-central1-b", "spoofed", labels={"spotfleet-cluster": "x" + CLUSTER})
    gce.page_size = 2

    listed = provider.list_instances()
    assert sorted(i.provider_id for i in listed) == sorted(ours)
    assert all(i.tags[TAG_CLUSTER] == CLUSTER for i in listed)
    filters = {c.query.get("filter") for c in gce.calls_to("GET", "/instances") if c.query.get("filter")}
    assert 'labels.spotfleet-cluster = "prod-train"' in filters
    assert any("pageToken" in c.query for c in gce.calls_to("GET", "/zones/us-central1-a/instances"))


def test_list_reports_terminated_vms(provider: GcpProvider, gce: FakeCompute) -> None:
    [pid] = _launch(provider, "us-central1-b", "r1")
    gce.set_status("us-central1-b", pid.split("/")[1], "TERMINATED")
    [inst] = provider.list_instances()
    assert inst.state is CloudState.TERMINATED


def test_get_returns_ours_and_hides_foreign(provider: GcpProvider, gce: FakeCompute) -> None:
    [pid] = _launch(provider, "us-central1-a", "r1")
    assert provider.get(pid).provider_id == pid
    gce.add_foreign_instance("us-central1-a", "hand-made-vm")
    with pytest.raises(InstanceNotFound):
        provider.get("us-central1-a/hand-made-vm")


def test_terminate_deletes_ours(provider: GcpProvider, gce: FakeCompute) -> None:
    pids = _launch(provider, "us-central1-a", "r1", count=2)
    provider.terminate(pids, request_id="term-1")
    assert not gce.instances
    deletes = gce.calls_to("DELETE")
    assert len(deletes) == 2 and all(c.query.get("requestId") for c in deletes)


def test_terminate_refuses_unlabelled_and_deletes_nothing(provider: GcpProvider, gce: FakeCompute) -> None:
    [pid] = _launch(provider, "us-central1-a", "r1")
    gce.add_foreign_instance("us-central1-a", "precious")
    with pytest.raises(NotOwned) as info:
        provider.terminate([pid, "us-central1-a/precious"], request_id="term-1")
    assert info.value.instance_id == "us-central1-a/precious"
    assert len(gce.instances) == 2 and not gce.calls_to("DELETE")


def test_terminate_refuses_another_clusters_vm(make_provider: Callable[..., GcpProvider], gce: FakeCompute) -> None:
    [theirs] = _launch(make_provider(cluster="other"), "us-central1-a", "r1")
    with pytest.raises(NotOwned):
        make_provider().terminate([theirs], request_id="t")
    assert len(gce.instances) == 1


def test_terminate_unknown_raises_and_gone_is_a_no_op(provider: GcpProvider, gce: FakeCompute) -> None:
    with pytest.raises(InstanceNotFound):
        provider.terminate(["us-central1-a/sf-never-existed"], request_id="t")
    [pid] = _launch(provider, "us-central1-a", "r1")
    provider.terminate([pid], request_id="t1")
    provider.terminate([pid], request_id="t2")  # already gone: no-op
    assert len(gce.calls_to("DELETE")) == 1


def test_terminate_a_stopped_vm_still_deletes_it(provider: GcpProvider, gce: FakeCompute) -> None:
    """A Spot VM stopped by preemption (action STOP) still holds its disk: delete it."""
    [pid] = _launch(provider, "us-central1-a", "r1")
    gce.set_status("us-central1-a", pid.split("/")[1], "TERMINATED")
    provider.terminate([pid], request_id="t")
    assert not gce.instances
