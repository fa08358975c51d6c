"""Fixtures: a Compute Engine REST server on loopback and a GcpProvider pointed at it.

The provider uses the real google-cloud-compute clients (REST transport) with
``ClientOptions(api_endpoint="http://127.0.0.1:PORT")`` and ``AnonymousCredentials``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from spotfleet.clock import FakeClock
from spotfleet.providers.gcp import GcpProvider
from spotfleet.providers.gcp_config import GcpProviderConfig
from tests.providers.gcp.gce_server import ComputeServer, FakeCompute
from tests.providers.gcp.gcp_support import CLUSTER, ZONES


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
