"""pytest fixtures for the AWS provider tests (helpers and shims live in ``aws_moto``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from aws_moto import CLUSTER, REGION, CatalogPrices, FleetShim, free_port, make_config

from spotfleet.clock import FakeClock
from spotfleet.providers.aws import AwsProvider, AwsProviderConfig


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server subprocess on a free loopback port, for the whole session."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # waiting for a subprocess to bind, not for a policy
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def moto(moto_endpoint: str) -> str:
    """The endpoint, with moto's state reset so every test starts from an empty account."""
    req = urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=10).close()
    return moto_endpoint


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
