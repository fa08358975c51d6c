"""Fixtures for the AWS provider tests: a real moto server over loopback HTTP.

moto serves EC2, SQS and EventBridge, but returns placeholder spot prices,
honours only the first CreateFleet override, ignores client tokens and never
runs out of capacity. The shims here fill those gaps at the botocore layer, so
the provider's own code path (serialisation, HTTP, parsing, pagination) is the
one production runs:

- ``CatalogPrices`` answers DescribeSpotPriceHistory (``before-send``, i.e. with
  a real EC2 XML body that botocore parses, paginated) with prices built from
  the bundled catalog, mapped from AZ ids to this moto account's zone names;
- ``FleetShim`` records every CreateFleet request as the provider built it,
  emulates stockouts per (instance type, zone) by removing those overrides
  before the call and adding the matching ``Errors`` entries after it, and
  injects whole-call errors (capacity, quota, throttling, permissions).
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from spotfleet.catalog import load_catalog
from spotfleet.clock import FakeClock
from spotfleet.model.offering import Market
from spotfleet.providers.aws import AwsProvider, AwsProviderConfig

REGION = "us-east-1"
CLUSTER = "test-cluster"
AMI = "ami-12c6146b"  # one of moto's bundled images


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server subprocess on a free loopback port, for the whole session."""
    port = _free_port()
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


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def http_response(status: int, body: bytes = b"", content_type: str = "text/xml") -> AWSResponse:
    return AWSResponse("http://shim", status, {"Content-Type": content_type}, _Raw(body))


@dataclass
class CatalogPrices:
    """Realistic spot prices for DescribeSpotPriceHistory, served as EC2 XML.

    Each (type, zone) gets an older point at the catalog price and a newer one at
    ``LIVE_FACTOR`` × catalog, so a test can tell live prices from catalog ones
    and that the latest point wins. Pages hold ``page_size`` points.
    """

    zone_ids: dict[str, str]
    now: datetime
    page_size: int = 25
    calls: int = 0
    points: list[tuple[str, str, float, datetime]] = field(default_factory=list)

    LIVE_FACTOR = 0.9

    def __post_init__(self) -> None:
        zone_of = {v: k for k, v in self.zone_ids.items()}
        for o in load_catalog(("aws",)).spot():
            if o.region != REGION or o.zone not in zone_of:
                continue
            zone = zone_of[o.zone]
            newer = (o.instance_type, zone, round(o.price_per_hour * self.LIVE_FACTOR, 6), self.now - timedelta(hours=1))
            older = (o.instance_type, zone, o.price_per_hour, self.now - timedelta(days=2))
            # Alternate the order so "latest wins" cannot rely on response order.
            self.points.extend([newer, older] if len(self.points) % 4 else [older, newer])

    def live_price(self, instance_type: str, zone: str) -> float | None:
        """The price the newest point says (what the provider must report)."""
        latest = max((p for p in self.points if p[:2] == (instance_type, zone)), key=lambda p: p[3], default=None)
        return latest[2] if latest else None

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.calls += 1
        form = parse_qs(request.body.decode() if isinstance(request.body, bytes) else request.body)
        wanted = {v[0] for k, v in form.items() if k.startswith("InstanceType.")}
        start = int(form.get("NextToken", ["0"])[0])
        matching = [p for p in self.points if not wanted or p[0] in wanted]
        page = matching[start:start + self.page_size]
        items = "".join(
            f"<item><instanceType>{t}</instanceType><productDescription>Linux/UNIX</productDescription>"
            f"<spotPrice>{p:.6f}</spotPrice><timestamp>{ts.strftime('%Y-%m-%dT%H:%M:%S.000Z')}</timestamp>"
            f"<availabilityZone>{z}</availabilityZone></item>"
            for t, z, p, ts in page
        )
        token = f"<nextToken>{start + self.page_size}</nextToken>" if start + self.page_size < len(matching) else ""
        body = (
            '<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
            f"<requestId>shim</requestId><spotPriceHistorySet>{items}</spotPriceHistorySet>{token}"
            "</DescribeSpotPriceHistoryResponse>"
        )
        return http_response(200, body.encode())


@pytest.fixture
def catalog_prices(session: boto3.Session, zone_ids: dict[str, str], clock: FakeClock) -> CatalogPrices:
    prices = CatalogPrices(zone_ids=zone_ids, now=clock.now())
    session.events.register("before-send.ec2.DescribeSpotPriceHistory", prices)
    return prices


@dataclass
class FleetShim:
    """Records CreateFleet requests; emulates stockouts and injects errors."""

    subnet_zone: dict[str, str]
    requests: list[dict[str, Any]] = field(default_factory=list)
    stocked_out: set[tuple[str, str]] = field(default_factory=set)  # (type, zone name)
    stockout_code: str = "InsufficientInstanceCapacity"
    next_error: tuple[int, str, str] | None = None  # (HTTP status, code, message), once
    _removed: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    _removed_all: bool = False

    def install(self, session: boto3.Session) -> FleetShim:
        session.events.register("before-parameter-build.ec2.CreateFleet", self._before_build)
        session.events.register("before-call.ec2.CreateFleet", self._before_call)
        session.events.register("after-call.ec2.CreateFleet", self._after_call)
        return self

    def _zone(self, override: dict[str, Any]) -> str:
        return str(override.get("AvailabilityZone") or self.subnet_zone[override["SubnetId"]])

    def _before_build(self, params: dict[str, Any], **_: Any) -> None:
        self.requests.append(copy.deepcopy(params))
        self._removed = []
        lifecycle = params["TargetCapacitySpecification"]["DefaultTargetCapacityType"]
        for config in params.get("LaunchTemplateConfigs", []):
            kept = []
            for override in config.get("Overrides", []):
                if (override["InstanceType"], self._zone(override)) in self.stocked_out:
                    self._removed.append(({"LaunchTemplateSpecification": config["LaunchTemplateSpecification"], "Overrides": override}, lifecycle))
                else:
                    kept.append(override)
            config["Overrides"] = kept

    def _errors(self) -> list[dict[str, Any]]:
        return [
            {
                "LaunchTemplateAndOverrides": lto,
                "Lifecycle": lifecycle,
                "ErrorCode": self.stockout_code,
                "ErrorMessage": f"There is no {lifecycle} capacity available that matches your request.",
            }
            for lto, lifecycle in self._removed
        ]

    def _before_call(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if self.next_error is not None:
            status, code, message = self.next_error
            self.next_error = None
            return http_response(status), {
                "Error": {"Code": code, "Message": message},
                "ResponseMetadata": {"HTTPStatusCode": status},
            }
        body = params.get("body") or {}
        has_override = any(".Overrides." in k for k in body)
        if self._removed and not has_override:  # every override stocked out
            self._removed_all = True
            return http_response(200), {
                "FleetId": "fleet-00000000-0000-0000-0000-stockout0000",
                "Errors": self._errors(),
                "Instances": [],
                "ResponseMetadata": {"HTTPStatusCode": 200},
            }
        return None

    def _after_call(self, parsed: dict[str, Any], http_response: AWSResponse, **_: Any) -> None:
        if http_response.status_code < 300 and self._removed and not self._removed_all:
            parsed.setdefault("Errors", []).extend(self._errors())
        self._removed = []
        self._removed_all = False

    @property
    def last(self) -> dict[str, Any]:
        return self.requests[-1]


@pytest.fixture
def fleet(session: boto3.Session, subnets: dict[str, str]) -> FleetShim:
    return FleetShim(subnet_zone={v: k for k, v in subnets.items()}).install(session)


def make_config(moto: str, *, subnets: dict[str, list[str]] | None = None, **overrides: Any) -> AwsProviderConfig:
    fields: dict[str, Any] = {
        "regions": [REGION],
        "endpoint_url": moto,
        "ami_id": AMI,
        "subnets": subnets or {},
        "on_demand_price_source": "catalog",
        "retry_mode": "standard",
        "max_attempts": 2,
        "sqs_wait_seconds": 0,
        "extra_tags": {"team": "ml-platform"},
    }
    fields.update(overrides)
    return AwsProviderConfig(**fields)


@pytest.fixture
def config(moto: str, subnets: dict[str, str], zone_ids: dict[str, str]) -> AwsProviderConfig:
    """Subnets for three zones: two keyed by zone name, one by AZ id (both are accepted)."""
    chosen = sorted(subnets)[:3]
    keyed = {chosen[0]: [subnets[chosen[0]]], chosen[1]: [subnets[chosen[1]]], zone_ids[chosen[2]]: [subnets[chosen[2]]]}
    return make_config(moto, subnets=keyed)


@pytest.fixture
def provider(
    config: AwsProviderConfig, session: boto3.Session, clock: FakeClock, catalog_prices: CatalogPrices, fleet: FleetShim
) -> AwsProvider:
    return AwsProvider(config, cluster=CLUSTER, clock=clock, session=session)


def eventbridge_event(detail_type: str, detail: dict[str, Any], *, source: str = "aws.ec2", resources: list[str] | None = None) -> dict[str, Any]:
    return {"Source": source, "DetailType": detail_type, "Detail": json.dumps(detail), "Resources": resources or []}


SPOT = Market.SPOT
