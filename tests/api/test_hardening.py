"""Issue 16's found defects, one test each (red on main, green here), on SQLite
and PostgreSQL where the store is involved: a client's mistake is one clear 4xx
and nothing is stored; secrets stay out of jobs, banners and files."""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from spotfleet.agent.runner import JobRunner
from spotfleet.api.app import create_app
from spotfleet.clock import FakeClock
from spotfleet.config import load_config
from spotfleet.errors import InvalidSpec
from spotfleet.model.job import Job
from spotfleet.redact import RedactingFilter, redact
from spotfleet.store import Store
from spotfleet.wire import Assignment
from tests.controller.harness import TOKEN, Harness, make_harness

SPEC: dict[str, Any] = {"name": "a", "command": "true"}


@pytest.fixture
def h(store: Store, tmp_path: Path) -> Harness:
    return make_harness(store, tmp_path)


@pytest.fixture
def client(h: Harness) -> TestClient:
    return TestClient(create_app(h.controller), raise_server_exceptions=False)


def stored(h: Harness) -> int:
    return len(h.store.list_jobs())


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"max_price_per_hour": float("inf")}, "max_price_per_hour"),
        ({"max_price_per_hour": float("nan")}, "max_price_per_hour"),
        ({"expected_duration": 1e20}, "expected_duration"),
        ({"expected_duration": "400d"}, "expected_duration"),
        ({"checkpoint": {"interval": "inf"}}, "checkpoint.interval"),
        ({"tenant": "a\x00b"}, "tenant"),
        ({"tenant": "two words"}, "tenant"),
        ({"command": "echo \x00"}, "command"),
        ({"env": {"X": "a\x00"}}, "env"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"labels": {"k": "\x1b[31m"}}, "labels"),
        ({"checkpoint": {"signal": "SIGKILL"}}, "checkpoint.signal"),
        ({"checkpoint": {"signal": "_dfl"}}, "checkpoint.signal"),
        ({"checkpoint": {"signal": "STOP"}}, "checkpoint.signal"),
        ({"resources": {"gpu_memory_gib": 1e300}}, "resources.gpu_memory_gib"),
        ({"deadline": "2000-01-01T00:00:00Z"}, "deadline"),
        ({"resources": {"gpu_types": ["H1OO"]}}, "resources.gpu_types"),
    ],
)
def test_invalid_values_are_422_and_nothing_is_stored(h: Harness, client: TestClient, extra: dict[str, Any],
                                                      field: str) -> None:  # fmt: skip
    body = json.dumps({**SPEC, **extra})  # Python's json writes Infinity/NaN, as a careless client would
    resp = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert resp.status_code in (400, 422), resp.text
    if resp.status_code == 422:
        assert resp.json()["field"] == field, resp.json()
    assert stored(h) == 0


def test_unknown_gpu_lists_the_known_ones(client: TestClient) -> None:
    resp = client.post("/v1/jobs", json={**SPEC, "resources": {"gpu_types": ["H1OO"]}})
    assert resp.status_code == 422 and "H100" in resp.json()["error"] and "V100" in resp.json()["error"]
    assert client.post("/v1/jobs", json={**SPEC, "resources": {"gpu_types": ["v100"]}}).status_code == 201


def test_deeply_nested_json_is_a_400_not_a_500(h: Harness, client: TestClient) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for path in ("/v1/jobs", "/v1/agent/heartbeat"):
        resp = client.post(path, content=deep, headers={"content-type": "application/json"})
        assert resp.status_code == 400 and "nested too deeply" in resp.json()["error"]
    nested: Any = "x"
    for _ in range(40):
        nested = {"k": nested}
    resp = client.post("/v1/jobs", json={**SPEC, "labels": {"k": "v"}, "dataset": nested})
    assert resp.status_code == 400 and stored(h) == 0


def test_bodies_over_the_limit_are_413(h: Harness) -> None:
    client = TestClient(create_app(h.controller, max_body=64 * 1024))
    big = {**SPEC, "env": {"BIG": "x" * 100_000}}
    assert client.post("/v1/jobs", json=big).status_code == 413

    def chunked() -> Any:  # no Content-Length: the streamed bytes are counted
        for _ in range(20):
            yield b" " * 8192

    assert client.post("/v1/jobs", content=chunked(), headers={"content-type": "application/json"}).status_code == 413
    default = TestClient(create_app(h.controller))
    huge = json.dumps({**SPEC, "labels": {f"k{i}": "v" * 1000 for i in range(2000)}})  # ~2 MB
    assert default.post("/v1/jobs", content=huge, headers={"content-type": "application/json"}).status_code == 413
    assert stored(h) == 0


def test_append_log_authorizes_before_touching_the_filesystem(h: Harness, tmp_path: Path) -> None:
    job = h.submit(name="a")
    h.step()
    h.register_all()
    client = TestClient(create_app(h.controller))
    inst = h.job(job.id).instance_ids[0]
    for job_id in ("../../escaped", "job-unknown", "..", "a/b"):
        resp = client.post("/v1/agent/logs", headers={"Authorization": f"Bearer {TOKEN}{inst}"},
                           json={"job_id": job_id, "attempt": 1, "offset": 0, "data": "x"})  # fmt: skip
        assert resp.status_code == 403, resp.text
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "logs" / "job-unknown").exists()
    assert not (tmp_path / "logs").exists() or list((tmp_path / "logs").iterdir()) == []
    ok = client.post("/v1/agent/logs", headers={"Authorization": f"Bearer {TOKEN}{inst}"},
                     json={"job_id": job.id, "attempt": 1, "offset": 0, "data": "hello\n"})  # fmt: skip
    assert ok.status_code == 200
    log = h.controller.job_logs.path(job.id, 1)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(log.parent.stat().st_mode) == 0o700


def test_the_legacy_token_cannot_be_whitespace_or_short(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTFLEET_API_TOKEN", "   ")
    with pytest.raises(InvalidSpec, match="empty or whitespace"):
        load_config(overrides={"api.host": "0.0.0.0"})


def test_jobs_get_a_clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {"SPOTFLEET_API_TOKEN": "admin-secret-0123456789", "SPOTFLEET_DATABASE": "postgresql://u:pw@db/x",
               "AWS_SECRET_ACCESS_KEY": "aws", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json", "DATABASE_URL": "x"}  # fmt: skip
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "env.json"
    runner = JobRunner(work_dir=tmp_path / "work", clock=FakeClock())
    a = Assignment(job_id="job-env", attempt=1, name="env", env={"MINE": "1"}, gpu_indices=[],
                   command=[sys.executable, "-c", f"import json,os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"],
                   checkpoint_dir=str(tmp_path / "ckpt" / "job-env"))  # fmt: skip
    proc = runner.start(a)
    assert proc.popen.wait(timeout=60) == 0
    env = json.loads(out.read_text())
    assert not set(secrets) & set(env), sorted(set(secrets) & set(env))
    assert env["MINE"] == "1" and env["SPOTFLEET_JOB_ID"] == "job-env" and env["PATH"]
    assert stat.S_IMODE((tmp_path / "ckpt" / "job-env").stat().st_mode) == 0o700
    assert stat.S_IMODE(proc.log_path.stat().st_mode) == 0o600


def test_passwords_are_masked_in_urls_everywhere() -> None:
    url = "postgresql+psycopg://postgres:hunter2@db.internal:5432/spotfleet"
    assert redact(url) == "postgresql+psycopg://postgres:***@db.internal:5432/spotfleet"
    assert redact("Authorization: Bearer sf_abc_def") == "Authorization: Bearer ***"
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "store %s", (url,), None)
    RedactingFilter().filter(record)
    assert "hunter2" not in record.getMessage()


def test_the_banner_and_errors_hide_the_database_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spotfleet.errors import StoreUnavailable

    store = Store("postgresql://postgres:hunter2@127.0.0.1:1/none")
    assert "hunter2" not in store.safe_url
    with pytest.raises(StoreUnavailable) as err:
        store.migrate()
    assert "hunter2" not in str(err.value)


def test_the_data_dir_is_private(tmp_path: Path) -> None:
    from spotfleet.service import Service

    data = tmp_path / "data"
    cfg = load_config(overrides={"data_dir": str(data), "api.port": 0})
    service = Service(cfg, clock=FakeClock())
    try:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        db = data / "spotfleet.db"
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
    finally:
        service.store.close()


def test_agent_config_of_local_instances_is_private(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    from spotfleet.files import write_private

    write_private(path, "token: x\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and os.access(path, os.R_OK)


def test_durations_are_bounded() -> None:
    from spotfleet.model.durations import parse_duration

    for bad in ("inf", 1e20, float("inf"), "nan", "366d", "P999999999D"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert parse_duration("365d") == timedelta(days=365)


def bound_agent(h: Harness) -> tuple[Job, TestClient, dict[str, str]]:
    """A job bound to a registered instance, and an API client with that instance's agent token."""
    job = h.submit(name="a")
    h.step()
    h.register_all()
    inst = h.job(job.id).instance_ids[0]
    client = TestClient(create_app(h.controller), raise_server_exceptions=False)
    return job, client, {"Authorization": f"Bearer {TOKEN}{inst}"}


def test_nul_in_agent_reports_is_refused_before_the_store(h: Harness) -> None:
    job, client, auth_header = bound_agent(h)
    beat = {"jobs": [{"job_id": "x\x00", "attempt": 1, "status": "running"}],
            "events": [{"kind": "k\x00", "message": "m", "at": "2026-01-01T00:00:00Z"}]}  # fmt: skip
    resp = client.post("/v1/agent/heartbeat", json=beat, headers=auth_header)
    assert resp.status_code == 422 and "NUL" in resp.json()["error"]
    log = {"job_id": job.id, "attempt": 1, "offset": 0, "data": "binary \x00 output"}
    assert client.post("/v1/agent/logs", json=log, headers=auth_header).status_code == 200


def test_agent_event_fields_past_the_store_columns_are_422(h: Harness) -> None:
    """The fuzzer's find in CI: an event ``level`` longer than its VARCHAR(16) was
    PostgreSQL's truncation error, a 500 (SQLite does not check lengths)."""
    _, client, auth_header = bound_agent(h)
    event = {"kind": "k", "message": "m", "at": "2026-01-01T00:00:00Z"}
    for field, value in (("level", "x" * 17), ("kind", "k" * 65), ("job_id", "j" * 65)):
        beat = {"events": [{**event, field: value}]}
        resp = client.post("/v1/agent/heartbeat", json=beat, headers=auth_header)
        assert resp.status_code == 422 and field in resp.json()["error"], resp.text
    ok = client.post("/v1/agent/heartbeat", json={"events": [{**event, "level": "x" * 16}]}, headers=auth_header)
    assert ok.status_code == 200, ok.text


def test_huge_query_integers_are_422_not_a_database_overflow(h: Harness, client: TestClient) -> None:
    """The fuzzer's find in CI: ``offset`` past BIGINT was PostgreSQL's error, a 500."""
    h.submit(name="a")
    resp = client.get("/v1/jobs", params={"offset": 95699997449799055100602245717877063680})
    assert resp.status_code == 422 and "offset" in resp.json()["error"]
    assert client.get("/v1/jobs", params={"offset": 2**53}).json() == []


def test_agent_numbers_past_the_store_columns_are_refused_or_dropped(h: Harness) -> None:
    job, client, auth_header = bound_agent(h)
    attempt = h.job(job.id).attempt
    over = {"job_id": job.id, "attempt": attempt, "status": "exited", "exit_code": 2**40}
    resp = client.post("/v1/agent/heartbeat", json={"jobs": [over]}, headers=auth_header)
    assert resp.status_code == 422 and "exit_code" in resp.json()["error"]
    # a progress step is the job's own JSON: one past INTEGER is not kept as a counter,
    # and the heartbeat that carries it still lands
    running = {"job_id": job.id, "attempt": attempt, "status": "running", "progress": {"step": 2**40}}
    resp = client.post("/v1/agent/heartbeat", json={"jobs": [running]}, headers=auth_header)
    assert resp.status_code == 200, resp.text
    h.step()
    assert h.job(job.id).state.value == "running"


def test_event_messages_are_redacted_in_the_store(h: Harness) -> None:
    from spotfleet.store.store import EventRecord

    h.store.add_event(EventRecord(at=h.clock.now(), kind="x", message="cannot reach postgresql://u:hunter2@db/x"))
    assert "hunter2" not in h.store.events(limit=5)[-1].message


def test_openapi_has_bearer_security_and_the_job_spec_body(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert any(s == {"type": "http", "scheme": "bearer", **{k: v for k, v in s.items() if k not in ("type", "scheme")}}
               for s in schemes.values())  # fmt: skip
    body = schema["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/JobSpec"}
    assert "name" in schema["components"]["schemas"]["JobSpec"]["properties"]
    assert schema["paths"]["/v1/agent/heartbeat"]["post"]["security"]
    assert "authorization" not in json.dumps(schema["paths"]["/v1/jobs"]["get"].get("parameters", [])).lower()
