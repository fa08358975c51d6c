"""Billing Catalog refresh: machine price = cores + RAM + GPUs, only when sane."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from spotfleet.providers.gcp import GcpProvider
from spotfleet.providers.gcp_pricing import PRICE_SOURCE
from tests.providers.gcp.gce_server import FakeCompute

US_EAST4 = ["us-east4"]


def sku(description: str, usage: str, price: float, regions: list[str], unit: str = "h") -> dict[str, Any]:
    units, nanos = int(price), round((price - int(price)) * 1e9)
    return {
        "name": f"services/6F81-5844-456A/skus/{description.replace(' ', '-')}",
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "usageType": usage,
        },
        "serviceRegions": regions,
        "pricingInfo": [
            {
                "pricingExpression": {
                    "usageUnit": unit,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {
                                "currencyCode": "USD",
                                "units": str(units),
                                "nanos": nanos,
                            },
                        }
                    ],
                }
            }
        ],
    }


SKUS = [
    sku("A3 Instance Core running in Virginia", "OnDemand", 0.0335, US_EAST4),
    sku("A3 Instance Ram running in Virginia", "OnDemand", 0.00449, US_EAST4, "GiBy.h"),
    sku("Nvidia H100 80GB GPU running in Virginia", "OnDemand", 9.0, US_EAST4),
    sku("Spot Preemptible A3 Instance Core running in Virginia", "Preemptible", 0.0134, US_EAST4),
    sku(
        "Spot Preemptible A3 Instance Ram running in Virginia",
        "Preemptible",
        0.0018,
        US_EAST4,
        "GiBy.h",
    ),
    sku("Spot Preemptible Nvidia H100 80GB GPU running in Virginia", "Preemptible", 2.25, US_EAST4),
    sku("Commitment v1: A3 Cpu in Virginia for 1 Year", "Commit1Yr", 0.02, US_EAST4),
    # G2 spot parts priced absurdly (a unit mix-up): must be rejected by the sanity check
    sku("Spot Preemptible G2 Instance Core running in Virginia", "Preemptible", 5.0, US_EAST4),
    sku(
        "Spot Preemptible G2 Instance Ram running in Virginia",
        "Preemptible",
        1.0,
        US_EAST4,
        "GiBy.h",
    ),
    sku("Spot Preemptible Nvidia L4 GPU running in Virginia", "Preemptible", 3.0, US_EAST4),
]


@pytest.fixture
def billing() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            seen.append(query)
            assert url.path == "/v1/services/6F81-5844-456A/skus"
            start = int(query.get("pageToken", 0))
            page = {
                "skus": SKUS[start : start + 4],
                "nextPageToken": str(start + 4) if start + 4 < len(SKUS) else "",
            }
            data = json.dumps(page).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_refresh_prices_a3_from_its_parts(
    make_provider: Callable[..., GcpProvider],
    gce: FakeCompute,
    billing: tuple[str, list[dict[str, str]]],
) -> None:
    endpoint, seen = billing
    provider = make_provider(billing_refresh=True, billing_endpoint=endpoint, billing_api_key="k-123")
    offerings = provider.offerings()

    spot = offerings.find("gcp:spot:a3-highgpu-8g:us-east4-a")
    on_demand = offerings.find("gcp:on_demand:a3-highgpu-8g:us-east4-a")
    assert spot is not None and on_demand is not None
    assert spot.price_per_hour == pytest.approx(208 * 0.0134 + 1872 * 0.0018 + 8 * 2.25)
    assert on_demand.price_per_hour == pytest.approx(208 * 0.0335 + 1872 * 0.00449 + 8 * 9.0)
    assert on_demand.on_demand_price_per_hour == on_demand.price_per_hour
    assert spot.price_source == PRICE_SOURCE and spot.price_observed_at is not None

    g2 = offerings.find("gcp:spot:g2-standard-4:us-east4-a")
    assert g2 is not None and g2.price_source == "catalog"  # 5 $/vCPU is not believable
    central = offerings.find("gcp:spot:a3-highgpu-8g:us-central1-a")
    assert central is not None and central.price_source == "catalog"  # no SKU for that region
    assert provider.last_repricing is not None and provider.last_repricing.updated == 2
    assert len(seen) == 3 and all(q["key"] == "k-123" and q["currencyCode"] == "USD" for q in seen)


def test_billing_outage_keeps_catalog_prices(make_provider: Callable[..., GcpProvider], gce: FakeCompute) -> None:
    provider = make_provider(billing_refresh=True, billing_endpoint="http://127.0.0.1:9")
    offerings = provider.offerings()
    assert len(offerings) > 0 and {o.price_source for o in offerings} == {"catalog"}
