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
    assert load_config(overrides={"api.host": "0.0.0.0", "api.token": "t" * 16}).api.host == "0.0.0.0"
    with pytest.raises(InvalidSpec, match=r"api.token: the API token is empty or whitespace") as err:
        load_config(overrides={"api.host": "0.0.0.0", "api.token": "   "})
    with pytest.raises(InvalidSpec, match=r"api.token: the API token is 5 characters; use at least 16") as err:
        load_config(overrides={"api.host": "0.0.0.0", "api.token": "short"})
    assert "short" not in str(err.value)  # the token itself is never echoed
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


def test_gpu_partitions_config_example_validates() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "config-gpu-partitions.yaml"
    policy = load_config(path).gpu_partitioning.policy()
    assert policy.layout_for("a2-highgpu-1g", "A100") == ("1g.5gb",) * 7
    assert policy.layout_for("p4de.24xlarge", "A100-80GB") == ("3g.40gb", "2g.20gb", "2g.20gb")
    assert (policy.mig_reconfigure, policy.mps, policy.memory_over) == (False, True, "stop")


def test_a_bad_mig_layout_names_the_key_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("gpu_partitioning:\n  mig_layouts: {a100: 8x1g.5gb}\n")
    with pytest.raises(InvalidSpec, match=r"gpu_partitioning.mig_layouts: a100: layout '8x1g.5gb' needs 8 compute "
                                          r"slices; a GPU has 7"):  # fmt: skip
        load_config(path)


def test_batch_submit_is_all_or_nothing_and_keeps_order(client: TestClient) -> None:
    specs = [{"name": f"b{i}", "command": "true"} for i in range(5)]
    bad = client.post(
        "/v1/jobs/batch", json={"jobs": [*specs, {"name": "x", "command": "y", "resources": {"gpus": -1}}]}
    )
    assert bad.status_code == 422 and bad.json()["error"].startswith("jobs[5].resources.gpus")
    assert client.get("/v1/jobs").json() == []  # none of the batch was stored
    assert client.post("/v1/jobs/batch", json={"jobs": []}).status_code == 400
    assert client.post("/v1/jobs/batch", json=specs).status_code == 400
    made = client.post("/v1/jobs/batch", json={"jobs": specs})
    assert made.status_code == 201 and [j["name"] for j in made.json()] == [f"b{i}" for i in range(5)]
    assert [j["name"] for j in client.get("/v1/jobs").json()] == [f"b{i}" for i in range(5)]


def test_listing_pages_in_sql_newest_first_pages(client: TestClient) -> None:
    client.post("/v1/jobs/batch", json={"jobs": [{"name": f"j{i}", "command": "true"} for i in range(25)]})
    page = client.get("/v1/jobs", params={"limit": 10})
    assert page.headers["X-Total-Count"] == "25"
    assert [j["name"] for j in page.json()] == [f"j{i}" for i in range(15, 25)]  # the newest 10, oldest first
    older = client.get("/v1/jobs", params={"limit": 10, "offset": 10}).json()
    assert [j["name"] for j in older] == [f"j{i}" for i in range(5, 15)]
    last = client.get("/v1/jobs", params={"limit": 10, "offset": 20}).json()
    assert [j["name"] for j in last] == [f"j{i}" for i in range(5)]
    assert client.get("/v1/jobs", params={"state": "running"}).headers["X-Total-Count"] == "0"
    h = client.get("/healthz").json()
    assert h["role"] == "leader" and "epoch" in h and client.get("/readyz").json()["ready"] is True
