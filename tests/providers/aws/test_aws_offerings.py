"""Offerings from a real EC2 API (moto server): types, zones, spot and on-demand prices."""

from __future__ import annotations

import json
from typing import Any

import boto3
from aws_moto import CLUSTER, REGION, CatalogPrices, http_response, make_config

from spotfleet.catalog import load_catalog
from spotfleet.clock import FakeClock
from spotfleet.model.offering import Market
from spotfleet.providers.aws import AwsProvider, AwsProviderConfig
from spotfleet.providers.aws_prices import SOURCE_CATALOG, SOURCE_PRICING_API, SOURCE_SPOT_HISTORY


def _catalog_on_demand() -> dict[str, float]:
    return {o.instance_type: o.price_per_hour for o in load_catalog(("aws",)).on_demand() if o.region == REGION}


def test_spot_offerings_carry_live_prices_per_zone_name(
    provider: AwsProvider,
    catalog_prices: CatalogPrices,
    config: AwsProviderConfig,
    zone_ids: dict[str, str],
    clock: FakeClock,
) -> None:
    offerings = provider.offerings()
    spot = offerings.spot()
    assert len(spot) > 20
    configured = {z for z in zone_ids if config.subnets_for(zone_name=z, zone_id=zone_ids[z])}
    assert {o.zone for o in offerings} == configured  # only zones with a subnet
    for o in spot:
        assert o.price_source == SOURCE_SPOT_HISTORY
        assert o.price_per_hour == catalog_prices.live_price(o.instance_type, o.zone)  # the newest point
        assert o.price_observed_at == clock.now()
        assert dict(o.extra)["az_id"] == zone_ids[o.zone]  # catalog AZ id ↔ this account's zone name
        assert 0 < o.price_per_hour < o.on_demand_price_per_hour
    assert catalog_prices.calls >= 2  # more than one page: pagination followed


def test_on_demand_from_catalog_and_every_price_has_a_source(provider: AwsProvider) -> None:
    catalog = _catalog_on_demand()
    offerings = provider.offerings()
    for o in offerings.on_demand():
        assert o.price_source == SOURCE_CATALOG
        assert o.price_observed_at is None  # the bundled snapshot's age is unknown, and shown so
        assert o.price_per_hour == catalog[o.instance_type]
    assert all(o.price_per_hour > 0 for o in offerings)
    assert provider.price_report.on_demand_catalog == len(offerings.on_demand())


def test_gpu_types_are_whole_nvidia_gpus_named_like_the_catalog(provider: AwsProvider) -> None:
    offerings = provider.offerings()
    types = set(offerings.instance_types())
    assert "g5.xlarge" in types and "p4d.24xlarge" in types
    assert not any(t.startswith("g6f.") for t in types)  # fractional GPUs are skipped
    p4de = next(o for o in offerings if o.instance_type == "p4de.24xlarge")
    assert (p4de.gpu, p4de.gpu_count, p4de.nvlink) == ("A100-80GB", 8, True)
    g5 = next(o for o in offerings if o.instance_type == "g5.xlarge")
    assert (g5.gpu, g5.gpu_count, g5.vcpus, g5.memory_gib) == ("A10G", 1, 4.0, 16.0)


def test_moto_placeholder_spot_price_is_not_trusted(
    moto: str, config: AwsProviderConfig, clock: FakeClock, zone_ids: dict[str, str]
) -> None:
    """Without the price fixture moto says $0.00001/h: implausible, so the catalog is used."""
    plain = boto3.Session(aws_access_key_id="t", aws_secret_access_key="t", region_name=REGION)
    provider = AwsProvider(config, cluster=CLUSTER, clock=clock, session=plain)
    spot = provider.offerings().spot()
    catalog = {(o.zone, o.instance_type): o.price_per_hour for o in load_catalog(("aws",)).spot()}
    assert spot and all(o.price_source == SOURCE_CATALOG for o in spot)
    assert all(o.price_per_hour == catalog[(zone_ids[o.zone], o.instance_type)] for o in spot)
    assert provider.price_report.spot_implausible > 0


def test_spot_prices_refresh_on_schedule_not_on_every_call(
    provider: AwsProvider, catalog_prices: CatalogPrices, clock: FakeClock, config: AwsProviderConfig
) -> None:
    first = provider.offerings()
    calls = catalog_prices.calls
    assert provider.offerings() is first  # cached
    assert catalog_prices.calls == calls
    clock.advance(config.price_refresh_interval_s)
    second = provider.offerings()
    assert catalog_prices.calls > calls
    assert {o.price_observed_at for o in second.spot()} == {clock.now()}


def test_failed_spot_refresh_keeps_old_prices_visibly_aging(
    provider: AwsProvider, clock: FakeClock, config: AwsProviderConfig
) -> None:
    first_seen = clock.now()
    provider.offerings()

    def denied(request: Any, **_: Any) -> Any:
        body = b"<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>denied</Message></Error></Errors><RequestID>x</RequestID></Response>"
        return http_response(403, body)

    # Clients copy the session's hooks when made: register on the provider's client.
    provider.clients.ec2(REGION).meta.events.register_first("before-send.ec2.DescribeSpotPriceHistory", denied)
    clock.advance(config.price_refresh_interval_s)
    offerings = provider.offerings()
    assert {o.price_observed_at for o in offerings.spot()} == {first_seen}  # stale, and visibly so
    assert any("UnauthorizedOperation" in e for e in provider.price_report.errors)


def _price_list_entry(instance_type: str, price: float) -> str:
    return json.dumps(
        {
            "product": {"attributes": {"instanceType": instance_type, "regionCode": REGION}},
            "terms": {
                "OnDemand": {
                    "T1": {"priceDimensions": {"D1": {"unit": "Hrs", "pricePerUnit": {"USD": f"{price:.4f}"}}}}
                }
            },
        }
    )


def test_on_demand_prices_from_the_price_list_api(
    moto: str, session: boto3.Session, catalog_prices: CatalogPrices, clock: FakeClock, subnets: dict[str, str]
) -> None:
    live = {"g5.xlarge": 1.006, "p5.48xlarge": 55.04}
    seen: list[dict[str, Any]] = []

    def pricing(request: Any, **_: Any) -> Any:
        query = json.loads(request.body)
        seen.append(query)
        filters = {f["Field"]: f["Value"] for f in query["Filters"]}
        instance_type = filters["instanceType"]
        entries = [_price_list_entry(instance_type, live[instance_type])] if instance_type in live else []
        return http_response(
            200, json.dumps({"PriceList": entries, "FormatVersion": "aws_v1"}).encode(), "application/x-amz-json-1.1"
        )

    session.events.register("before-send.pricing.GetProducts", pricing)
    zone = sorted(subnets)[0]
    config = make_config(moto, subnets={zone: [subnets[zone]]}, on_demand_price_source="pricing-api")
    offerings = AwsProvider(config, cluster=CLUSTER, clock=clock, session=session).offerings()
    g5 = next(o for o in offerings.on_demand() if o.instance_type == "g5.xlarge")
    assert (g5.price_per_hour, g5.price_source, g5.price_observed_at) == (1.006, SOURCE_PRICING_API, clock.now())
    g5_spot = next(o for o in offerings.spot() if o.instance_type == "g5.xlarge")
    assert g5_spot.on_demand_price_per_hour == 1.006
    g4 = next(o for o in offerings.on_demand() if o.instance_type == "g4dn.xlarge")
    assert g4.price_source == SOURCE_CATALOG  # no Price List answer: the catalog, labelled
    assert {"regionCode": REGION, "operatingSystem": "Linux", "tenancy": "Shared"}.items() <= {
        f["Field"]: f["Value"] for f in seen[0]["Filters"]
    }.items()


def test_unreachable_price_list_api_falls_back_to_the_catalog(
    moto: str, session: boto3.Session, catalog_prices: CatalogPrices, clock: FakeClock, subnets: dict[str, str]
) -> None:
    zone = sorted(subnets)[0]
    config = make_config(moto, subnets={zone: [subnets[zone]]}, on_demand_price_source="pricing-api")
    provider = AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)
    offerings = provider.offerings()
    assert offerings.on_demand() and all(o.price_source == SOURCE_CATALOG for o in offerings.on_demand())
    assert any(e.startswith("on-demand prices") for e in provider.price_report.errors)
    assert all(o.market is Market.ON_DEMAND or o.price_source == SOURCE_SPOT_HISTORY for o in offerings)
