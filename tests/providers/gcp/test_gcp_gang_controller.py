"""The controller driving a 2-node gang on GCP (local Compute server): a stockout
in the gang's zone moves the whole gang, with a fresh compact placement policy,
to the next zone; no member is left behind in the stocked-out one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from spotfleet.clock import FakeClock
from spotfleet.model.spec import JobSpec
from spotfleet.providers.gang_placement import TAG_PLACEMENT_GROUP
from spotfleet.providers.gcp import GcpProvider
from tests.providers.gcp.gce_server import FakeCompute
from tests.providers.gcp.gcp_support import simple_controller


def test_a_stockout_moves_the_whole_gang_to_another_zone_in_one_placement_policy(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute, clock: FakeClock, tmp_path: Path
) -> None:
    provider = make_provider()
    controller = simple_controller(provider, clock, tmp_path)
    gce.stockout("us-east4-a", how="operation")  # the cheapest 8×H100 spot zone
    spec = {"name": "ddp", "command": ["torchrun", "train.py"], "priority": "opportunistic",
            "resources": {"gpus": 8, "gpu_types": ["H100"], "nodes": 2}}  # fmt: skip
    controller.submit(JobSpec.model_validate(spec))
    for _ in range(4):
        controller.step()
        if len(gce.running()) >= 2:
            break

    tried = [c.path.split("/")[6] for c in gce.calls_to("POST", "/instances")]
    assert tried[0] == "us-east4-a", tried  # the gang first went for the cheapest zone
    vms = provider.list_instances()
    assert len(vms) == 2, [v.zone for v in vms]
    assert {v.zone for v in vms} == {"us-central1-a"}
    groups = {v.tags[TAG_PLACEMENT_GROUP] for v in vms}
    assert len(groups) == 1, "one gang, one placement policy"
    first = {c.body["resourcePolicies"][0] for c in gce.calls_to("POST", "/zones/us-east4-a/instances") if c.body}
    assert first and first.isdisjoint(next(iter({tuple(i["resourcePolicies"]) for i in gce.instances.values()})))
    attached = {tuple(i.get("resourcePolicies") or ()) for i in gce.instances.values()}
    assert len(attached) == 1 and len(next(iter(attached))) == 1
    assert all(c.body is not None and c.body.get("resourcePolicies") for c in gce.calls_to("POST", "/instances"))
