"""The HTTP API: client mistakes are 4xx naming the field, never 500."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from spotfleet.api.app import create_app
from spotfleet.config import load_config
from spotfleet.errors import InvalidSpec
from spotfleet.store import Store
from tests.controller.harness import TOKEN, make_harness


@pytest.fixture
def client(sqlite_store: Store, tmp_path: Path) -> TestClient:
    h = make_harness(sqlite_store, tmp_path)
    return TestClient(create_app(h.controller), raise_server_exceptions=True)


def test_submit_get_list_cancel(client: TestClient) -> None:
    resp = client.post("/v1/jobs", json={"name": "a", "command": "true", "resources": {"gpus": 2}})
    assert resp.status_code == 201
    job_id = resp.json()["id"]
    assert client.get(f"/v1/jobs/{job_id}").json()["spec"]["resources"]["gpus"] == 2
    assert [j["id"] for j in client.get("/v1/jobs").json()] == [job_id]
    assert client.get("/v1/jobs", params={"state": "running"}).json() == []
    assert client.post(f"/v1/jobs/{job_id}/cancel").json()["cancel_requested"] is True
    assert client.get("/healthz").json()["ok"] is True


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "a", "command": "x", "resources": {"gpus": -1}}, "resources.gpus"),
        ({"name": "a", "command": "x", "gpu": 1}, "gpu"),
        ({"name": "a", "command": "x", "priority": "urgent"}, "priority"),
        ({"command": "x"}, "name"),
    ],
)
def test_invalid_specs_are_422_naming_the_field(client: TestClient, body: dict[str, object], field: str) -> None:
    resp = client.post("/v1/jobs", json=body)
    assert resp.status_code == 422
    assert resp.json()["field"] == field and field in resp.json()["error"]


def test_client_mistakes_are_4xx(client: TestClient) -> None:
    assert (
        client.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}).status_code == 400
    )
    assert client.get("/v1/jobs/nope").status_code == 404
    assert client.post("/v1/jobs/nope/cancel").status_code == 404
    assert client.get("/v1/jobs", params={"state": "bogus"}).status_code == 422
    assert client.post("/v1/agent/heartbeat", json={}).status_code == 401
    resp = client.post("/v1/agent/heartbeat", json={}, headers={"Authorization": f"Bearer {TOKEN}wrong"})
    assert resp.status_code == 401


def test_api_token_is_enforced_when_configured(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    client = TestClient(create_app(h.controller, api_token="s3cret"))
    assert client.get("/v1/jobs").status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/healthz").status_code == 200


def test_non_loopback_bind_requires_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTFLEET_API_TOKEN", raising=False)
    with pytest.raises(InvalidSpec, match=r"api: refusing to listen on 0\.0\.0\.0 without an API token"):
        load_config(overrides={"api.host": "0.0.0.0"})
    assert load_config(overrides={"api.host": "0.0.0.0", "api.token": "t"}).api.host == "0.0.0.0"
    assert load_config(overrides={"api.host": "::1"}).api.token is None


def test_config_typos_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("reconcile:\n  intervall: 5s\n")
    with pytest.raises(InvalidSpec, match=r"c.yaml: reconcile.intervall: unknown field"):
        load_config(path)


def test_cloud_config_example_validates() -> None:
    from spotfleet.providers.aws_config import AwsProviderConfig
    from spotfleet.providers.gcp_config import GcpProviderConfig

    path = Path(__file__).resolve().parents[2] / "examples" / "config-clouds.yaml"
    config = load_config(path)
    AwsProviderConfig.model_validate(config.providers["aws"])
    GcpProviderConfig.model_validate(config.providers["gcp"])
    assert config.policy == "spotfleet" and config.budgets.tenants == {"research": 40}
