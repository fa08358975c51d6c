"""The real controller step driving a 2-node gang on AWS (moto server over HTTP).

``Controller.step()`` with ``SimplePolicy`` and the AWS provider: the gang is
bound to two new instances launched into one cluster placement group created
once for it (``pg-<job>-0``). One member is then reclaimed (terminated in moto
without notice) while its pool has no capacity left: the requeued gang's launch
into ``pg-<job>-1`` fails with ``InsufficientInstanceCapacity`` for that pool
only, the pool is marked unavailable, and in the same step the whole gang is
bound again in another zone, in a third group. The old group is deleted by the
provider's listing once its last member is gone and its grace has passed (the
clock is a ``FakeClock``; nothing sleeps). No agent runs here: the unbound
survivor of the old gang is given back by the boot timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
from aws_moto import CLUSTER, FleetShim, PlacementGroupShim

from spotfleet.clock import FakeClock
from spotfleet.controller.controller import Controller
from spotfleet.controller.settings import PlanSettings
from spotfleet.model.instance import InstanceState
from spotfleet.model.job import JobState
from spotfleet.model.spec import JobSpec
from spotfleet.policies.simple import SimplePolicy
from spotfleet.providers.aws import AwsProvider
from spotfleet.providers.base import CloudState
from spotfleet.providers.gang_placement import GROUP_GRACE, TAG_PLACEMENT_GROUP
from spotfleet.store import Store


def test_a_group_capacity_error_on_relaunch_moves_the_whole_gang_and_the_old_group_is_collected(
    provider: AwsProvider, fleet: FleetShim, session: boto3.Session, ec2: Any, clock: FakeClock, tmp_path: Path
) -> None:
    groups = PlacementGroupShim(moto_ec2=ec2).install(session)
    store = Store(f"sqlite:///{tmp_path / 'spotfleet.db'}")
    store.migrate()
    settings = PlanSettings()
    controller = Controller(store=store, providers={"aws": provider}, policy=SimplePolicy(), clock=clock,
                            cluster=CLUSTER, settings=settings, data_dir=tmp_path,
                            controller_url=lambda: "https://controller.internal:8443")  # fmt: skip
    spec = {"name": "ddp", "command": ["torchrun", "train.py"], "priority": "opportunistic",
            "resources": {"gpus": 1, "gpu_types": ["A10G"], "nodes": 2}}  # fmt: skip
    job_id = controller.submit(JobSpec.model_validate(spec)).id
    start = clock.now()

    def live() -> dict[str, Any]:
        return {i.provider_id: i for i in provider.list_instances() if i.state is not CloudState.TERMINATED}

    # 1. One step binds the gang to two new instances in one new cluster group.
    controller.step()
    first = f"pg-{job_id}-0"
    [job] = store.list_jobs()
    assert job.state is JobState.BOUND and len(job.bindings) == 2
    assert groups.created == [first], "created once for the gang"
    assert groups.groups[first][0] == "cluster"
    old = live()
    assert len(old) == 2 and {i.tags[TAG_PLACEMENT_GROUP] for i in old.values()} == {first}
    [zone] = {i.zone for i in old.values()}
    [itype] = {i.instance_type for i in old.values()}
    assert sorted(groups.members(first)) == sorted(old)
    assert [r["LaunchTemplateConfigs"][0]["Overrides"][0]["Placement"] for r in fleet.requests] == [
        {"GroupName": first}
    ] * 2

    # 2. Five minutes later one member is reclaimed and its pool is out of capacity.
    clock.advance(minutes=5)
    reclaimed, survivor = sorted(old)
    ec2.terminate_instances(InstanceIds=[reclaimed])
    fleet.stocked_out[(itype, zone)] = "InsufficientInstanceCapacity"
    sent_before = len(fleet.requests)
    report = controller.step()

    failed_group, moved_group = f"pg-{job_id}-1", f"pg-{job_id}-2"
    refused = fleet.requests[sent_before]
    assert refused["LaunchTemplateConfigs"][0]["Overrides"][0]["Placement"] == {"GroupName": failed_group}
    assert len(refused["LaunchTemplateConfigs"][0]["Overrides"]) == 1, "a gang member tries its pool only"
    assert groups.created == [first, failed_group, moved_group]
    [job] = store.list_jobs()
    assert job.state is JobState.BOUND and job.attempt == 3, "bound, refused, bound again elsewhere"
    new = {i: v for i, v in live().items() if i not in old}
    assert len(new) == 2 and len(report.launched) == 2
    assert {i.tags[TAG_PLACEMENT_GROUP] for i in new.values()} == {moved_group}
    assert {i.zone for i in new.values()} != {zone} and len({i.zone for i in new.values()}) == 1
    bound = {store.get_instance(b.instance_id).provider_id for b in job.bindings}
    assert bound == set(new), "the whole gang moved: no member left in the old zone"
    assert any(i.state is InstanceState.FAILED and i.offering.zone == zone for i in store.list_instances())
    assert groups.deleted == []

    # 3. The unbound survivor goes at its boot timeout; the old group once empty and past its grace.
    clock.advance(seconds=(start + settings.boot_timeout - clock.now()).total_seconds() + 1)
    controller.step()
    assert survivor not in live() and groups.members(first) == []
    assert groups.deleted == [], "the step's listing ran while the survivor was still there"
    clock.advance(minutes=1, seconds=30)  # the listing collects at most once a minute
    assert clock.now() - start > GROUP_GRACE
    controller.step()
    assert groups.deleted == [first], f"{failed_group} is empty but younger than the grace; {moved_group} is in use"
    assert sorted(groups.members(moved_group)) == sorted(new)
    assert set(live()) == set(new)
