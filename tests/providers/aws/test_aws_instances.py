"""list / get / terminate against moto: ownership tags are checked, not assumed."""

from __future__ import annotations

from typing import Any

import pytest
from aws_moto import CLUSTER, pick, request, run_foreign

from spotfleet.errors import InstanceNotFound, NotOwned
from spotfleet.model.offering import Market
from spotfleet.providers.aws import AwsProvider
from spotfleet.providers.base import TAG_CLUSTER, CloudState


def state(ec2: Any, instance_id: str) -> str:
    return str(ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"])


def test_list_instances_returns_only_this_clusters(provider: AwsProvider, ec2: Any) -> None:
    launched = provider.launch(request("req-list", pick(provider, "g5.xlarge")[:1], count=2))
    run_foreign(ec2)
    run_foreign(ec2, tags={TAG_CLUSTER: "someone-else"})
    listed = provider.list_instances()
    assert sorted(i.provider_id for i in listed) == sorted(i.provider_id for i in launched)
    for instance in listed:
        assert instance.state is CloudState.RUNNING  # moto starts instances at once
        assert instance.market is Market.SPOT
        assert instance.zone == launched[0].zone
        assert instance.request_id == "req-list"
        assert instance.address


def test_get_own_foreign_and_unknown(provider: AwsProvider, ec2: Any) -> None:
    [own] = provider.launch(request("req-get", pick(provider, "g5.xlarge")[:1]))
    assert provider.get(own.provider_id).provider_id == own.provider_id
    with pytest.raises(NotOwned):
        provider.get(run_foreign(ec2))
    with pytest.raises(InstanceNotFound) as caught:
        provider.get("i-0123456789abcdef0")
    assert caught.value.instance_id == "i-0123456789abcdef0"


def test_terminate_refuses_an_untagged_instance_and_touches_nothing(provider: AwsProvider, ec2: Any) -> None:
    [own] = provider.launch(request("req-term-refuse", pick(provider, "g5.xlarge")[:1]))
    foreign = run_foreign(ec2)
    with pytest.raises(NotOwned) as caught:
        provider.terminate([own.provider_id, foreign], request_id="term-1")
    assert caught.value.instance_id == foreign
    assert state(ec2, foreign) == "running"
    assert state(ec2, own.provider_id) == "running"  # all-or-nothing: checks come first


def test_terminate_refuses_another_clusters_instance(provider: AwsProvider, ec2: Any) -> None:
    other = run_foreign(ec2, tags={TAG_CLUSTER: "someone-else"})
    with pytest.raises(NotOwned):
        provider.terminate([other], request_id="term-2")
    assert state(ec2, other) == "running"


def test_terminate_unknown_id_raises_instance_not_found(provider: AwsProvider) -> None:
    with pytest.raises(InstanceNotFound):
        provider.terminate(["i-0123456789abcdef0"], request_id="term-3")


def test_terminate_own_then_again_is_a_no_op(provider: AwsProvider, ec2: Any) -> None:
    launched = provider.launch(request("req-term", pick(provider, "g5.xlarge")[:1], count=2))
    ids = [i.provider_id for i in launched]
    provider.terminate(ids, request_id="term-4")
    assert {state(ec2, i) for i in ids} <= {"shutting-down", "terminated"}
    provider.terminate(ids, request_id="term-4")  # idempotent
    assert {i.state for i in provider.list_instances()} <= {CloudState.STOPPING, CloudState.TERMINATED}
    assert provider.get(ids[0]).tags[TAG_CLUSTER] == CLUSTER


def test_satisfies_the_provider_protocol_and_the_registry_factory(moto: str, clock: Any) -> None:
    from spotfleet.providers.aws import build_aws_provider
    from spotfleet.providers.base import Provider

    built = build_aws_provider({"regions": ["us-east-1"], "endpoint_url": moto}, cluster=CLUSTER, clock=clock)
    assert isinstance(built, Provider)
    assert built.name == "aws" and built.cluster == CLUSTER
