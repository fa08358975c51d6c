"""Offerings: catalog prices, trimmed to what machineTypes/acceleratorTypes say exists."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from spotfleet.catalog import load_catalog
from spotfleet.clock import FakeClock
from spotfleet.errors import PermanentError
from spotfleet.model.offering import Market
from spotfleet.providers import gcp
from spotfleet.providers.gcp import GcpProvider
from spotfleet.providers.gcp_config import GcpProviderConfig, N1GpuShape
from tests.providers.gcp.gce_server import ComputeServer, FakeCompute


def test_offerings_are_catalog_rows_that_exist_in_each_zone(provider: GcpProvider, gce: FakeCompute) -> None:
    gce.machine_types["us-central1-b"] = ("g2-standard-4",)
    offerings = provider.offerings()
    catalog = load_catalog(["gcp"])
    by_zone = {z: set(offerings.where(lambda o, z=z: o.zone == z).instance_types()) for z in provider.zones}
    assert by_zone["us-central1-b"] == {"g2-standard-4"}
    assert by_zone["us-central1-a"] == {
        "a2-highgpu-1g",
        "a2-highgpu-8g",
        "a3-highgpu-8g",
        "g2-standard-4",
        "g2-standard-8",
    }
    assert "a2-highgpu-1g" not in by_zone["us-east4-a"]  # not in the catalog for that zone
    for o in offerings:
        row = catalog.find(o.key)
        assert row is not None and row.price_per_hour == o.price_per_hour
    spot = offerings.find("gcp:spot:a3-highgpu-8g:us-east4-a")
    assert spot is not None and spot.price_per_hour < spot.on_demand_price_per_hour


def test_offerings_are_cached_for_the_ttl(provider: GcpProvider, gce: FakeCompute, clock: FakeClock) -> None:
    provider.offerings()
    provider.offerings()
    assert len(gce.calls_to("GET", "/machineTypes")) == 3  # one per zone
    clock.advance(hours=1, seconds=1)
    provider.offerings()
    assert len(gce.calls_to("GET", "/machineTypes")) == 6


def test_regions_expand_to_catalog_zones(make_provider: Callable[..., GcpProvider], gce: FakeCompute) -> None:
    provider = make_provider(zones=(), regions=("us-east4",))
    assert provider.zones == ("us-east4-a", "us-east4-b", "us-east4-c")


def test_n1_shape_needs_the_accelerator_in_the_zone(
    make_provider: Callable[..., GcpProvider], gce: FakeCompute
) -> None:
    gce.accelerator_types["us-central1-b"] = ("nvidia-l4",)
    shape = N1GpuShape(
        machine_type="n1-standard-8",
        accelerator="nvidia-tesla-t4",
        on_demand_price=0.73,
        spot_price=0.2,
    )
    offerings = make_provider(n1_gpus=[shape]).offerings().where(lambda o: o.instance_type == shape.instance_type)
    assert {o.zone for o in offerings} == {"us-central1-a", "us-east4-a"}
    assert {o.market for o in offerings} == {Market.SPOT, Market.ON_DEMAND}
    assert all(o.price_source == "config" for o in offerings)


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"zones": ("us-central1",)}, "zones"),
        ({"zones": (), "regions": ()}, "zones or regions"),
        ({"labels": {"spotfleet-cluster": "x"}}, "labels"),
        ({"labels": {"Team": "ml"}}, "labels"),
        ({"termination_action": "HIBERNATE"}, "termination_action"),
        ({"surprise": True}, "surprise"),
    ],
)
def test_config_rejects_mistakes(fields: dict[str, object], where: str) -> None:
    base: dict[str, object] = {"project": "my-project-1", "zones": ("us-central1-a",)}
    with pytest.raises(ValidationError, match=where):
        GcpProviderConfig(**{**base, **fields})


def test_config_parses_human_durations() -> None:
    config = GcpProviderConfig(project="my-project-1", zones=("us-central1-a",), max_run_duration="2h30m")
    assert config.max_run_duration is not None and config.max_run_duration.total_seconds() == 9000


def test_registry_factory_builds_a_working_provider(gce_server: ComputeServer, clock: FakeClock) -> None:
    options = {
        "project": gce_server.compute.project,
        "zones": ["us-central1-a"],
        "api_endpoint": gce_server.endpoint,
        "anonymous_credentials": True,
    }
    provider = gcp.from_options(options, cluster="c1", clock=clock)
    assert provider.list_instances() == []
    assert len(provider.offerings()) > 0
    with pytest.raises(ValidationError, match="zone"):
        gcp.from_options({**options, "zone": "us-central1-a"}, cluster="c1", clock=clock)


def test_missing_credentials_is_a_permanent_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: FakeClock
) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    with pytest.raises(PermanentError, match="no Google credentials"):
        gcp.from_options({"project": "my-project-1", "zones": ["us-central1-a"]}, cluster="c1", clock=clock)
