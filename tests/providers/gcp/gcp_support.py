"""Shared builders for the GCP provider tests (imported by tests and conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spotfleet.clock import Clock
from spotfleet.controller.controller import Controller
from spotfleet.model.offering import Market, Offering
from spotfleet.policies.simple import SimplePolicy
from spotfleet.providers.base import TAG_CLUSTER, TAG_INSTANCE_ID, TAG_REQUEST_ID, AgentBootstrap, LaunchRequest
from spotfleet.providers.gcp import GcpProvider
from spotfleet.store import Store

ZONES = ("us-central1-a", "us-central1-b", "us-east4-a")
CLUSTER = "prod-train"


def offering_in(provider: GcpProvider, instance_type: str, zone: str, market: Market = Market.SPOT) -> Offering:
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


def simple_controller(provider: GcpProvider, clock: Clock, data_dir: Path, **kwargs: Any) -> Controller:
    """The real controller with ``SimplePolicy`` on a fresh SQLite store, driving ``provider``."""
    store = Store(f"sqlite:///{data_dir / 'spotfleet.db'}")
    store.migrate()
    return Controller(
        store=store,
        providers={"gcp": provider},
        policy=SimplePolicy(),
        clock=clock,
        cluster=CLUSTER,
        data_dir=data_dir,
        controller_url=lambda: "https://controller.internal:8443",
        **kwargs,
    )
