"""``spotfleet token create|list|revoke`` against the store (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from spotfleet.api.app import create_app
from spotfleet.cli.main import app
from spotfleet.store import Store
from tests.controller.harness import make_harness

runner = CliRunner()


def test_token_create_list_revoke(store: Store, tmp_path: Path) -> None:
    db = store.url
    made = runner.invoke(app, ["token", "create", "tenant:alpha", "--scope", "read", "--db", db, "-o", "json"])
    assert made.exit_code == 0, made.output
    record = json.loads(made.stdout)
    token = record["token"]
    listed = runner.invoke(app, ["token", "list", "--db", db, "-o", "json"])
    assert [t["id"] for t in json.loads(listed.stdout)] == [record["id"]] and token not in listed.stdout
    h = make_harness(store, tmp_path)
    client = TestClient(create_app(h.controller, api_token="admin-token-0123456789"))
    who = client.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"}).json()
    assert (who["kind"], who["tenant"], who["can_submit"]) == ("tenant", "alpha", False)
    assert runner.invoke(app, ["token", "revoke", record["id"], "--db", db]).exit_code == 0
    assert client.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    again = runner.invoke(app, ["token", "revoke", record["id"], "--db", db])
    assert again.exit_code == 3 and "no live token" in again.output
    bad = runner.invoke(app, ["token", "create", "tenant:alpha", "--scope", "write", "--db", db])
    assert bad.exit_code == 2 and "unknown scope 'write'" in bad.output
