"""pytest fixtures for the AWS provider tests (helpers and shims live in ``aws_moto``;
the moto server itself is in ``tests/providers/conftest.py``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from aws_moto import CLUSTER, REGION, CatalogPrices, FleetShim, make_config

from spotfleet.clock import FakeClock
from spotfleet.providers.aws import AwsProvider, AwsProviderConfig


@pytest.fixture
def session() -> boto3.Session:
    """A fresh session per test (hooks registered on it reach every client it makes)."""
    return boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)


@pytest.fixture
def ec2(moto: str, session: boto3.Session) -> Any:
    return session.client("ec2", endpoint_url=moto)


@pytest.fixture
def zone_ids(ec2: Any) -> dict[str, str]:
    """Zone name → AZ id in this moto account (moto shuffles them like AWS does)."""
    return {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}


@pytest.fixture
def subnets(ec2: Any) -> dict[str, str]:
    """Zone name → the default subnet in it."""
    return {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 2, 12, 0, tzinfo=UTC))


@pytest.fixture
def catalog_prices(session: boto3.Session, zone_ids: dict[str, str], clock: FakeClock) -> CatalogPrices:
    prices = CatalogPrices(zone_ids=zone_ids, now=clock.now())
    session.events.register("before-send.ec2.DescribeSpotPriceHistory", prices)
    return prices


@pytest.fixture
def fleet(session: boto3.Session, subnets: dict[str, str]) -> FleetShim:
    return FleetShim(subnet_zone={v: k for k, v in subnets.items()}).install(session)


@pytest.fixture
def config(moto: str, subnets: dict[str, str], zone_ids: dict[str, str]) -> AwsProviderConfig:
    """Subnets for three zones: two keyed by zone name, one by AZ id (both are accepted)."""
    chosen = sorted(subnets)[:3]
    keyed = {
        chosen[0]: [subnets[chosen[0]]],
        chosen[1]: [subnets[chosen[1]]],
        zone_ids[chosen[2]]: [subnets[chosen[2]]],
    }
    return make_config(moto, subnets=keyed)


@pytest.fixture
def provider(
    config: AwsProviderConfig, session: boto3.Session, clock: FakeClock, catalog_prices: CatalogPrices, fleet: FleetShim
) -> AwsProvider:
    return AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)
