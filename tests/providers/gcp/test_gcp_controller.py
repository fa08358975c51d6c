"""The lead's controller driving the GCP provider against the local Compute server.

A stockout in the cheapest zone: the next-cheapest zone is bought in the same
reconcile step, and the stocked-out pool is avoided for the capacity-backoff TTL.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from spotfleet.clock import FakeClock
from spotfleet.controller.settings import PlanSettings
from spotfleet.model.spec import JobSpec
from spotfleet.providers.gcp import GcpProvider
from tests.providers.gcp.gce_server import FakeCompute
from tests.providers.gcp.gcp_support import simple_controller

EAST = "gcp:spot:a3-highgpu-8g:us-east4-a"  # $20.04/h: the cheapest 8×H100 spot pool configured
CENTRAL = "gcp:spot:a3-highgpu-8g:us-central1-a"  # $26.83/h: next-cheapest (ties broken by key)


def _job(name: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "command": ["python", "train.py"],
            "priority": "opportunistic",
            "resources": {"gpus": 8, "gpu_types": ["H100"]},
        }
    )


def _inserted_zones(gce: FakeCompute) -> list[str]:
    return [c.path.split("/")[6] for c in gce.calls_to("POST", "/instances")]


def test_stockout_falls_through_to_the_next_zone_in_one_step_and_is_avoided_for_the_ttl(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute, clock: FakeClock, tmp_path: Path
) -> None:
    provider = make_provider()
    settings = PlanSettings(capacity_backoff=timedelta(minutes=5))
    controller = simple_controller(provider, clock, tmp_path, settings=settings)
    gce.stockout("us-east4-a", how="operation")

    controller.submit(_job("first"))
    report = controller.step()

    assert _inserted_zones(gce) == ["us-east4-a", "us-central1-a"]  # both in this one step
    assert len(report.launched) == 1 and report.plans == 2
    [vm] = provider.list_instances()
    assert vm.zone == "us-central1-a" and vm.instance_type == "a3-highgpu-8g"
    unavailable = controller.store.load_state().unavailable
    assert unavailable[EAST] == clock.now() + settings.capacity_backoff
    assert CENTRAL not in unavailable

    # Within the TTL the stocked-out pool is not tried again, even though it is cheapest.
    gce.stockout_zones.clear()
    clock.advance(minutes=4)
    controller.submit(_job("second"))
    controller.step()
    assert _inserted_zones(gce)[2:] == ["us-central1-a"]

    # After the TTL it is the cheapest again and is bought.
    clock.advance(minutes=2)
    controller.submit(_job("third"))
    controller.step()
    assert _inserted_zones(gce)[3:] == ["us-east4-a"]
    assert sorted(i.zone for i in provider.list_instances()) == [
        "us-central1-a",
        "us-central1-a",
        "us-east4-a",
    ]
