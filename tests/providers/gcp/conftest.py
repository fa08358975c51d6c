"""Fixtures: a Compute Engine REST server on loopback and a GcpProvider pointed at it.

The provider uses the real google-cloud-compute clients (REST transport) with
``ClientOptions(api_endpoint="http://127.0.0.1:PORT")`` and ``AnonymousCredentials``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gce_server import ComputeServer, FakeCompute
from google.auth.credentials import AnonymousCredentials
from spotfleet.providers.base import (
    TAG_CLUSTER,
    TAG_INSTANCE_ID,
    TAG_REQUEST_ID,
    AgentBootstrap,
    LaunchRequest,
)
from spotfleet.providers.gcp import GcpProvider
from spotfleet.providers.gcp_config import GcpProviderConfig

from spotfleet.clock import FakeClock
from spotfleet.model.offering import Market, Offering

ZONES = ("us-central1-a", "us-central1-b", "us-east4-a")
CLUSTER = "prod-train"


@pytest.fixture
def gce_server() -> Iterator[ComputeServer]:
    with ComputeServer(FakeCompute(zones=ZONES)) as server:
        yield server


@pytest.fixture
def gce(gce_server: ComputeServer) -> FakeCompute:
    return gce_server.compute


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_provider(gce_server: ComputeServer, clock: FakeClock) -> Callable[..., GcpProvider]:
    def make(*, cluster: str = CLUSTER, **overrides: Any) -> GcpProvider:
        fields: dict[str, Any] = {
            "project": gce_server.compute.project,
            "zones": ZONES,
            "api_endpoint": gce_server.endpoint,
            "service_account": "spotfleet-node@test-project.iam.gserviceaccount.com",
            "labels": {"team": "ml"},
        }
        fields.update(overrides)
        return GcpProvider(
            GcpProviderConfig(**fields),
            cluster=cluster,
            clock=clock,
            credentials=AnonymousCredentials(),
        )

    return make


@pytest.fixture
def provider(make_provider: Callable[..., GcpProvider]) -> GcpProvider:
    return make_provider()


def offering_in(
    provider: GcpProvider, instance_type: str, zone: str, market: Market = Market.SPOT
) -> Offering:
    found = provider.offerings().find(f"gcp:{market.value}:{instance_type}:{zone}")
    assert found is not None, f"no offering {instance_type} in {zone}"
    return found


def launch_request(
    offering: Offering,
    *,
    request_id: str = "req-01HZX3K5",
    count: int = 1,
    alternatives: tuple[Offering, ...] = (),
    cluster: str = CLUSTER,
) -> LaunchRequest:
    return LaunchRequest(
        request_id=request_id,
        offering=offering,
        bootstrap=AgentBootstrap(
            controller_url="https://controller.internal:8443",
            agent_token="tok-secret",
            spotfleet_version="0.1.0",
            cluster=cluster,
        ),
        tags={TAG_CLUSTER: cluster, TAG_REQUEST_ID: request_id, TAG_INSTANCE_ID: "i-Node/7"},
        count=count,
        alternatives=alternatives,
    )
