"""Scoped tokens: who may call what, on SQLite and PostgreSQL.

The matrix: every API route × {no token, a wrong token, viewer, tenant A, tenant
B, admin, agent of instance X, agent of instance Y} → the expected status; a
refused call changes nothing (every table and the data dir are compared).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from spotfleet.api import auth
from spotfleet.api.app import create_app
from spotfleet.model import Job
from spotfleet.store import Store
from spotfleet.store.schema import Base
from tests.controller.harness import TOKEN, Harness, make_harness

LEGACY = "legacy-admin-token-0123456789"
WHO = ("none", "wrong", "viewer", "tenant_a", "tenant_b", "admin", "agent_x", "agent_y")


@dataclass
class World:
    h: Harness
    client: TestClient
    tokens: dict[str, str | None]
    job_a: Job
    job_b: Job
    x: str
    y: str
    data_dir: Path

    def call(self, who: str, method: str, path: str, **kw: Any) -> Any:
        token = self.tokens[who]
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return self.client.request(method, path, headers=headers, **kw)


@pytest.fixture
def world(store: Store, tmp_path: Path) -> World:
    h = make_harness(store, tmp_path)
    job_a = h.submit(name="a", tenant="alpha")
    job_b = h.submit(name="b", tenant="beta")
    h.step()
    h.register_all()
    h.step()
    x, y = h.job(job_a.id).instance_ids[0], h.job(job_b.id).instance_ids[0]
    now = h.clock.now()
    tokens: dict[str, str | None] = {
        "none": None,
        "wrong": "sf_000000000000_" + "x" * 43,
        "viewer": auth.create_token(store, kind="viewer", now=now)[0],
        "tenant_a": auth.create_token(store, kind="tenant:alpha", now=now)[0],
        "tenant_b": auth.create_token(store, kind="tenant:beta", scopes=["read", "submit"], now=now)[0],
        "admin": auth.create_token(store, kind="admin", now=now)[0],
        "agent_x": TOKEN + x,
        "agent_y": TOKEN + y,
    }
    client = TestClient(create_app(h.controller, api_token=LEGACY), raise_server_exceptions=True)
    return World(h, client, tokens, job_a, job_b, x, y, tmp_path)


def fingerprint(world: World) -> str:
    """Every row of every table, and every file under the data dir."""
    digest = hashlib.sha256()
    with world.h.store.session() as s:
        for table in Base.metadata.sorted_tables:
            rows = sorted(repr(tuple(r)) for r in s.execute(select(table)))
            digest.update(f"{table.name}:{rows}".encode())
    for path in sorted(world.data_dir.rglob("*")):
        if path.suffix not in (".db", ".db-wal", ".db-shm", ".db-journal"):
            digest.update(f"{path}:{path.stat().st_size if path.is_file() else 'dir'}".encode())
    return digest.hexdigest()


USERS = ("viewer", "tenant_a", "tenant_b", "admin")


def row(none: int = 401, wrong: int = 401, viewer: int = 200, tenant_a: int = 200, tenant_b: int = 200,
        admin: int = 200, agent_x: int = 403, agent_y: int = 403) -> dict[str, int]:  # fmt: skip
    return {"none": none, "wrong": wrong, "viewer": viewer, "tenant_a": tenant_a, "tenant_b": tenant_b,
            "admin": admin, "agent_x": agent_x, "agent_y": agent_y}  # fmt: skip


def routes(w: World) -> list[tuple[str, str, Callable[[], dict[str, Any]], dict[str, int]]]:
    a, x = w.job_a.id, w.x
    spec = {"name": "n", "command": "true", "tenant": "alpha"}

    def chunk() -> dict[str, Any]:
        return {"json": {"job_id": a, "attempt": 1, "offset": 0, "data": ""}}

    def revocable() -> dict[str, Any]:
        _, record = auth.create_token(w.h.store, kind="viewer", now=w.h.clock.now())
        return {"path": f"/v1/tokens/{record.id}"}

    fleet_only = row(tenant_a=403, tenant_b=403)
    admin_only = row(viewer=403, tenant_a=403, tenant_b=403)
    agent_only = row(viewer=403, tenant_a=403, tenant_b=403, admin=403, agent_x=200, agent_y=200)
    own_job = row(tenant_b=404)
    return [
        ("GET", "/healthz", dict, row(none=200, wrong=200, agent_x=200, agent_y=200)),
        ("GET", "/metrics", dict, fleet_only),
        ("POST", "/v1/jobs", lambda: {"json": spec}, row(viewer=403, tenant_a=201, tenant_b=403, admin=201)),
        ("GET", "/v1/jobs", dict, row()),
        ("GET", f"/v1/jobs/{a}", dict, own_job),
        ("GET", f"/v1/jobs/{a}/explain", dict, own_job),
        ("GET", f"/v1/jobs/{a}/logs", dict, own_job),
        ("POST", f"/v1/jobs/{a}/cancel", dict, row(viewer=403, tenant_b=404)),
        ("GET", "/v1/instances", dict, row()),
        ("POST", f"/v1/instances/{x}/interrupt", lambda: {"json": {}}, admin_only),
        ("GET", "/v1/events", dict, row()),
        ("GET", "/v1/summary", dict, fleet_only),
        ("POST", "/v1/fleet/down", lambda: {"json": {}}, admin_only),
        ("POST", "/v1/fleet/resume", dict, admin_only),
        ("GET", "/v1/whoami", dict, row(agent_x=200, agent_y=200)),
        ("GET", "/v1/tokens", dict, admin_only),
        ("POST", "/v1/tokens", lambda: {"json": {"kind": "viewer"}}, {**admin_only, "admin": 201}),
        ("DELETE", "", revocable, admin_only),
        ("POST", "/v1/agent/register", lambda: {"json": {}}, agent_only),
        ("POST", "/v1/agent/heartbeat", lambda: {"json": {}}, agent_only),
        ("POST", "/v1/agent/logs", chunk, {**agent_only, "agent_y": 403}),
    ]


def test_authorization_matrix(world: World) -> None:
    calls = 0
    for method, path, extra, expected in routes(world):
        for who in WHO:
            kw = extra()
            target = kw.pop("path", path)
            before = fingerprint(world)
            resp = world.call(who, method, target, **kw)
            calls += 1
            assert resp.status_code == expected[who], f"{method} {target} as {who}: {resp.status_code} {resp.text}"
            if resp.status_code >= 400:
                assert fingerprint(world) == before, f"{method} {target} as {who} changed state on refusal"
    assert calls == 21 * 8


def test_tenant_tokens_see_only_their_tenant(world: World) -> None:
    jobs = world.call("tenant_a", "GET", "/v1/jobs").json()
    assert {j["tenant"] for j in jobs} == {"alpha"}
    assert world.call("tenant_a", "GET", "/v1/jobs", params={"tenant": "beta"}).json() == []
    assert {j["tenant"] for j in world.call("viewer", "GET", "/v1/jobs").json()} == {"alpha", "beta"}
    assert [i["id"] for i in world.call("tenant_a", "GET", "/v1/instances").json()] == [world.x]
    events = world.call("tenant_b", "GET", "/v1/events", params={"limit": 1000}).json()
    assert events and all(e["job_id"] == world.job_b.id for e in events)
    resp = world.call("tenant_a", "POST", "/v1/jobs", json={"name": "n", "command": "true", "tenant": "beta"})
    assert resp.status_code == 403 and "beta" in resp.json()["detail"]


def test_whoami_names_the_principal(world: World) -> None:
    assert world.call("tenant_a", "GET", "/v1/whoami").json()["tenant"] == "alpha"
    assert world.call("agent_x", "GET", "/v1/whoami").json()["instance"] == world.x
    assert world.call("admin", "GET", "/v1/whoami").json()["admin"] is True
    resp = world.client.get("/v1/whoami", headers={"Authorization": f"Bearer {LEGACY}"})
    assert resp.json()["kind"] == "admin"  # the legacy single token keeps working as admin


def test_token_lifecycle_over_the_api(world: World) -> None:
    made = world.call("admin", "POST", "/v1/tokens", json={"kind": "tenant:gamma", "scopes": ["read"]}).json()
    token = made["token"]
    assert made["scopes"] == ["read"] and token.startswith(f"sf_{made['id']}_")
    listed = world.call("admin", "GET", "/v1/tokens").json()
    assert made["id"] in {t["id"] for t in listed} and all("token" not in t for t in listed)
    with world.h.store.session() as s:  # only the hash is stored
        from spotfleet.store.schema import ApiTokenRow

        stored = [r.token_hash for r in s.scalars(select(ApiTokenRow))]
    assert token not in stored and hashlib.sha256(token.encode()).hexdigest() in stored
    headers = {"Authorization": f"Bearer {token}"}
    assert world.client.get("/v1/jobs", headers=headers).status_code == 200
    assert world.client.post("/v1/jobs", headers=headers, json={"name": "n", "command": "x", "tenant": "gamma"}).status_code == 403  # fmt: skip
    assert world.call("admin", "DELETE", f"/v1/tokens/{made['id']}").status_code == 200
    assert world.client.get("/v1/jobs", headers=headers).status_code == 401
    assert world.call("admin", "DELETE", f"/v1/tokens/{made['id']}").status_code == 404
    bad = world.call("admin", "POST", "/v1/tokens", json={"kind": "tenant:"})
    assert bad.status_code == 422


def test_agent_cannot_claim_another_instance(world: World) -> None:
    other = world.h.store.get_instance(world.y).provider_id
    resp = world.call("agent_x", "POST", "/v1/agent/register", json={"provider_id": other})
    assert resp.status_code == 403


def test_whitespace_and_oversized_tokens_are_unauthenticated(world: World) -> None:
    for header in ("Bearer    ", "Bearer \t", "Basic abc", "Bearer " + "a" * 5000):
        assert world.client.get("/v1/jobs", headers={"Authorization": header}).status_code == 401


def test_open_loopback_without_tokens_is_admin_but_a_sent_token_still_counts(store: Store, tmp_path: Path) -> None:
    h = make_harness(store, tmp_path)
    h.submit(name="b", tenant="beta")
    token, _ = auth.create_token(store, kind="tenant:alpha", now=h.clock.now())
    client = TestClient(create_app(h.controller))
    assert len(client.get("/v1/jobs").json()) == 1  # no token on an open laptop controller: admin
    assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {token}"}).json() == []
    assert client.get("/v1/summary", headers={"Authorization": f"Bearer {token}"}).status_code == 403
