"""The GCE metadata emulator speaks GCE's protocol (raw HTTP, no watcher involved)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest

from spotfleet.metadata import GcpMetadataServer, UnsupportedNotice

PREEMPTED = "/computeMetadata/v1/instance/preempted"
MAINTENANCE = "/computeMetadata/v1/instance/maintenance-event"


@pytest.fixture
def client(gce: GcpMetadataServer) -> httpx.Client:
    return httpx.Client(base_url=gce.url, headers={"Metadata-Flavor": "Google"}, timeout=5)


def until(predicate: Callable[[], bool], *, timeout: float = 5.0) -> None:
    """Wait for a fact about a real peer (a request parked in the server)."""
    give_up = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < give_up, "condition never became true"
        time.sleep(0.005)


def test_flavor_header_is_required(gce: GcpMetadataServer) -> None:
    response = httpx.get(gce.url + "/computeMetadata/v1/instance/id")
    assert response.status_code == 403
    response = httpx.get(
        gce.url + "/computeMetadata/v1/instance/id", headers={"Metadata-Flavor": "Google", "X-Forwarded-For": "1.2.3.4"}
    )
    assert response.status_code == 403


def test_identity(client: httpx.Client) -> None:
    response = client.get("/computeMetadata/v1/instance/id")
    assert response.text == "4520031799277581759"
    assert response.headers["Metadata-Flavor"] == "Google"
    assert client.get("/computeMetadata/v1/instance/name").text == "worker-1"
    assert client.get("/computeMetadata/v1/instance/zone").text == "projects/123456789012/zones/us-central1-a"
    assert client.get("/computeMetadata/v1/instance/nothing").status_code == 404
    assert client.get("/latest/meta-data/instance-id").status_code == 404


def test_preempted_flips_and_etag_follows_the_value(client: httpx.Client, gce: GcpMetadataServer) -> None:
    before = client.get(PREEMPTED)
    assert before.text == "FALSE"
    gce.announce("spot")
    after = client.get(PREEMPTED)
    assert after.text == "TRUE"
    assert after.headers["ETag"] != before.headers["ETag"]
    gce.clear("spot")
    assert client.get(PREEMPTED).headers["ETag"] == before.headers["ETag"]


def test_wait_for_change_hangs_until_the_value_changes(client: httpx.Client, gce: GcpMetadataServer) -> None:
    result: list[str] = []
    waiter = threading.Thread(
        target=lambda: result.append(client.get(PREEMPTED, params={"wait_for_change": "true"}).text)
    )
    waiter.start()
    until(lambda: gce.waiting == 1)
    assert result == []  # still hanging
    gce.announce("spot")
    waiter.join(timeout=5)
    assert result == ["TRUE"]


def test_last_etag_returns_at_once_when_already_changed(client: httpx.Client, gce: GcpMetadataServer) -> None:
    etag = client.get(PREEMPTED).headers["ETag"]
    gce.announce("spot")  # changes between two requests are not missed
    started = time.monotonic()
    response = client.get(PREEMPTED, params={"wait_for_change": "true", "last_etag": etag})
    assert response.text == "TRUE"
    assert time.monotonic() - started < 1


def test_timeout_sec_returns_the_unchanged_value(client: httpx.Client) -> None:
    response = client.get(PREEMPTED, params={"wait_for_change": "true", "timeout_sec": "0.2"})
    assert response.status_code == 200
    assert response.text == "FALSE"


def test_maintenance_event(client: httpx.Client, gce: GcpMetadataServer) -> None:
    assert client.get(MAINTENANCE).text == "NONE"
    gce.announce("maintenance")
    assert client.get(MAINTENANCE).text == "TERMINATE_ON_HOST_MAINTENANCE"
    gce.announce("maintenance", action="MIGRATE_ON_HOST_MAINTENANCE")
    assert client.get(MAINTENANCE).text == "MIGRATE_ON_HOST_MAINTENANCE"
    with pytest.raises(UnsupportedNotice):
        gce.announce("maintenance", action="REBOOT")


def test_no_rebalance_on_gce(gce: GcpMetadataServer) -> None:
    with pytest.raises(UnsupportedNotice):
        gce.announce("rebalance")


def test_injected_503(client: httpx.Client, gce: GcpMetadataServer) -> None:
    gce.faults.fail_next(1)
    assert client.get(PREEMPTED).status_code == 503
    assert client.get(PREEMPTED).status_code == 200


def test_stop_releases_waiters() -> None:
    server = GcpMetadataServer(instance_id="1", zone="us-central1-a").start()
    result: list[int] = []

    def wait() -> None:
        try:
            response = httpx.get(
                server.url + PREEMPTED,
                params={"wait_for_change": "true"},
                headers={"Metadata-Flavor": "Google"},
                timeout=10,
            )
            result.append(response.status_code)
        except httpx.HTTPError:
            result.append(-1)

    waiter = threading.Thread(target=wait)
    waiter.start()
    until(lambda: server.waiting == 1)
    started = time.monotonic()
    server.stop()
    waiter.join(timeout=10)
    assert time.monotonic() - started < 5
    assert result and result[0] in (200, -1)
