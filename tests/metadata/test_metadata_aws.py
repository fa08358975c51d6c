"""The IMDSv2 emulator speaks EC2's protocol (raw HTTP, no watcher involved)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from spotfleet.clock import FakeClock
from spotfleet.metadata import AwsImdsServer, UnsupportedNotice

TTL = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN = "X-aws-ec2-metadata-token"


def token(client: httpx.Client, ttl: int = 60) -> dict[str, str]:
    response = client.put("/latest/api/token", headers={TTL: str(ttl)})
    assert response.status_code == 200
    assert response.headers[TTL] == str(ttl)
    return {TOKEN: response.text}


@pytest.fixture
def client(imds: AwsImdsServer) -> httpx.Client:
    return httpx.Client(base_url=imds.url, timeout=2)


def test_token_is_required_on_every_get(client: httpx.Client) -> None:
    assert client.get("/latest/meta-data/instance-id").status_code == 401
    assert client.get("/latest/meta-data/instance-id", headers={TOKEN: "forged"}).status_code == 401
    assert client.get("/latest/meta-data/instance-id", headers=token(client)).text == "i-0abc"


@pytest.mark.parametrize("ttl", [None, "0", "21601", "abc"])
def test_token_put_needs_a_valid_ttl(client: httpx.Client, ttl: str | None) -> None:
    headers = {} if ttl is None else {TTL: ttl}
    assert client.put("/latest/api/token", headers=headers).status_code == 400


def test_forwarded_requests_are_refused(client: httpx.Client) -> None:
    response = client.put("/latest/api/token", headers={TTL: "60", "X-Forwarded-For": "10.0.0.1"})
    assert response.status_code == 403


def test_token_expires_by_the_injected_clock(client: httpx.Client, clock: FakeClock) -> None:
    headers = token(client, ttl=60)
    clock.advance(59)
    assert client.get("/latest/meta-data/instance-id", headers=headers).status_code == 200
    clock.advance(1)
    assert client.get("/latest/meta-data/instance-id", headers=headers).status_code == 401


def test_expire_tokens_revokes_issued_tokens(client: httpx.Client, imds: AwsImdsServer) -> None:
    headers = token(client)
    imds.expire_tokens()
    assert client.get("/latest/meta-data/instance-id", headers=headers).status_code == 401
    assert client.get("/latest/meta-data/instance-id", headers=token(client)).status_code == 200


def test_identity_paths(client: httpx.Client) -> None:
    headers = token(client)
    assert client.get("/latest/meta-data/placement/availability-zone", headers=headers).text == "us-east-1b"
    assert client.get("/latest/meta-data/placement/region", headers=headers).text == "us-east-1"
    assert client.get("/latest/meta-data/instance-type", headers=headers).text == "p4d.24xlarge"
    assert client.get("/latest/meta-data/no-such-thing", headers=headers).status_code == 404


def test_spot_instance_action_is_404_until_announced(client: httpx.Client, imds: AwsImdsServer) -> None:
    headers = token(client)
    assert client.get("/latest/meta-data/spot/instance-action", headers=headers).status_code == 404
    assert client.get("/latest/meta-data/spot/termination-time", headers=headers).status_code == 404
    imds.announce("spot", 120)
    response = client.get("/latest/meta-data/spot/instance-action", headers=headers)
    assert response.status_code == 200
    assert response.text == '{"action":"terminate","time":"2026-03-01T12:02:00Z"}'
    assert client.get("/latest/meta-data/spot/termination-time", headers=headers).text == "2026-03-01T12:02:00Z"
    imds.clear("spot")
    assert client.get("/latest/meta-data/spot/instance-action", headers=headers).status_code == 404


@pytest.mark.parametrize("action", ["stop", "hibernate"])
def test_spot_actions(client: httpx.Client, imds: AwsImdsServer, action: str) -> None:
    imds.announce("spot", 30, action=action)
    body = json.loads(client.get("/latest/meta-data/spot/instance-action", headers=token(client)).text)
    assert body == {"action": action, "time": "2026-03-01T12:00:30Z"}


def test_unknown_action_or_kind_is_refused(imds: AwsImdsServer) -> None:
    with pytest.raises(UnsupportedNotice):
        imds.announce("spot", 120, action="explode")
    with pytest.raises(UnsupportedNotice):
        imds.announce("meteor", 120)
    assert imds.deadlines == {}


def test_rebalance_recommendation(client: httpx.Client, imds: AwsImdsServer, clock: FakeClock) -> None:
    headers = token(client)
    path = "/latest/meta-data/events/recommendations/rebalance"
    assert client.get(path, headers=headers).status_code == 404
    clock.advance(5)
    imds.announce("rebalance")
    assert client.get(path, headers=headers).text == '{"noticeTime":"2026-03-01T12:00:05Z"}'


def test_scheduled_maintenance(client: httpx.Client, imds: AwsImdsServer) -> None:
    headers = token(client)
    path = "/latest/meta-data/events/maintenance/scheduled"
    assert json.loads(client.get(path, headers=headers).text) == []
    imds.announce("maintenance", 3600, action="instance-retirement")
    [event] = json.loads(client.get(path, headers=headers).text)
    assert event["Code"] == "instance-retirement"
    assert event["NotBefore"] == "01 Mar 2026 13:00:00 GMT"
    assert event["State"] == "active"
    imds.clear()
    assert json.loads(client.get(path, headers=headers).text) == []


def test_fail_next_requests_then_recover(client: httpx.Client, imds: AwsImdsServer) -> None:
    headers = token(client)
    imds.faults.fail_next(2, status=500)
    statuses = [client.get("/latest/meta-data/instance-id", headers=headers).status_code for _ in range(3)]
    assert statuses == [500, 500, 200]


def test_hang_drops_the_request(imds: AwsImdsServer) -> None:
    imds.faults.hang_next(1, seconds=5)
    with httpx.Client(base_url=imds.url, timeout=0.2) as client, pytest.raises(httpx.ReadTimeout):
        client.put("/latest/api/token", headers={TTL: "60"})
    with httpx.Client(base_url=imds.url, timeout=2) as client:
        assert client.put("/latest/api/token", headers={TTL: "60"}).status_code == 200


def test_stop_releases_hanging_requests(clock: FakeClock) -> None:
    server = AwsImdsServer(instance_id="i-1", zone="us-east-1a", clock=clock).start()
    server.faults.hang_next(1, seconds=60)
    # 1 s: long enough for a loaded machine to dispatch the request
    with httpx.Client(base_url=server.url, timeout=1.0) as client, pytest.raises(httpx.ReadTimeout):
        client.get("/latest/meta-data/instance-id")
    server.stop()  # would block for a minute if the hang ignored stop
    # the handler logs the dropped request only once its hang ends, on its own (daemon) thread, so the
    # entry within 5 s of a 60 s hang is what shows stop() released it
    deadline = time.monotonic() + 5.0
    while not server.requests_to("/latest/meta-data/instance-id") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.requests_to("/latest/meta-data/instance-id")[0].status == 0
