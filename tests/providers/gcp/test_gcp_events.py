"""Preemptions and terminations from zone operations and instance status."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from spotfleet.clock import FakeClock
from spotfleet.model.events import NoticeKind
from spotfleet.providers.gcp import GcpProvider
from tests.providers.gcp.gce_server import FakeCompute
from tests.providers.gcp.gcp_support import launch_request, offering_in


def _one(provider: GcpProvider, zone: str = "us-central1-a", request_id: str = "r1") -> str:
    [inst] = provider.launch(launch_request(offering_in(provider, "g2-standard-4", zone), request_id=request_id))
    return inst.provider_id


def test_preemption_with_delete_gives_interruption_then_terminated(
    provider: GcpProvider, gce: FakeCompute, clock: FakeClock
) -> None:
    pid = _one(provider)
    assert provider.poll_events() == []
    op = gce.preempt("us-central1-a", pid.split("/")[1])
    clock.advance(5)

    events = provider.poll_events()
    kinds = {(e.provider_instance_id, e.kind) for e in events}
    assert kinds == {(pid, NoticeKind.SPOT_INTERRUPTION), (pid, NoticeKind.TERMINATED)}
    notice = next(e for e in events if e.kind is NoticeKind.SPOT_INTERRUPTION)
    assert notice.source == "gce-operation" and op["name"] in notice.detail
    assert notice.deadline == datetime.fromisoformat(op["insertTime"]) + timedelta(seconds=30)
    assert notice.observed_at == clock.now()
    assert any("operationType" in (c.query.get("filter") or "") for c in gce.calls_to("GET", "/operations"))

    assert provider.poll_events() == []  # de-duplicated across polls


def test_preemption_with_stop_reports_status_terminated(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute
) -> None:
    provider = make_provider(termination_action="STOP")
    pid = _one(provider, "us-east4-a")
    gce.preempt("us-east4-a", pid.split("/")[1])
    events = provider.poll_events()
    assert {e.kind for e in events} == {NoticeKind.SPOT_INTERRUPTION, NoticeKind.TERMINATED}
    terminated = next(e for e in events if e.kind is NoticeKind.TERMINATED)
    assert terminated.detail == "status TERMINATED"
    assert provider.poll_events() == []


def test_other_clusters_preemptions_are_ignored(make_provider: Callable[..., GcpProvider], gce: FakeCompute) -> None:
    ours, theirs = make_provider(), make_provider(cluster="other")
    pid = _one(theirs)
    gce.preempt("us-central1-a", pid.split("/")[1])
    assert ours.poll_events() == []


def test_a_restarted_controller_still_sees_a_deleted_vms_preemption(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute
) -> None:
    """With action DELETE the VM and its labels are gone; the name prefix identifies it."""
    pid = _one(make_provider())
    gce.preempt("us-central1-a", pid.split("/")[1])
    fresh = make_provider()
    events = fresh.poll_events()
    assert [(e.provider_instance_id, e.kind) for e in events] == [(pid, NoticeKind.SPOT_INTERRUPTION)]
