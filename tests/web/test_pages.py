"""The dashboard over HTTP, without a browser: login, who sees what, the numbers,
bad input. A controller on a real store with the fake provider and a fake clock
(tests/controller/harness.py), so every figure is deterministic."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from spotfleet.api.app import create_app
from spotfleet.api.auth import create_token
from spotfleet.api.principal import ADMIN, open_access, single_token
from spotfleet.cli.main import app as cli
from spotfleet.model import Job
from spotfleet.model.changes import EventRecord
from spotfleet.store import Store
from spotfleet.web import fmt
from spotfleet.web.session import COOKIE
from tests.controller.harness import Harness, make_harness

# Real scoped tokens (spotfleet.api.auth), minted into the test's store by ``scoped``.
TENANTS = {"token-of-a": ("tenant:a", ["read", "submit"]), "token-of-b": ("tenant:b", ["read"]),
           "token-of-viewer": ("viewer", None)}  # fmt: skip


def run(h: Harness, job: Job, *, minutes: float) -> None:
    """Place, start and finish a job on the fake cloud, the clock moving."""
    h.step()
    h.register_all()
    h.report(job, "running")
    h.step()
    h.clock.advance(minutes * 60)
    h.report(job, "exited", exit_code=0)
    h.step()


@pytest.fixture
def fleet(sqlite_store: Store, tmp_path: Path) -> Iterator[tuple[Harness, Job, Job]]:
    h = make_harness(sqlite_store, tmp_path, idle_ttl=timedelta(minutes=1))
    a = h.submit(name="alpha", tenant="a", resources={"gpus": 1})
    b = h.submit(name="beta", tenant="b", resources={"gpus": 1}, priority="critical")
    h.step()
    h.register_all()
    for job in (a, b):
        h.report(job, "running")
    h.step()
    h.clock.advance(30 * 60)
    yield h, a, b


def scoped(h: Harness) -> TestClient:
    """The dashboard behind real scoped tokens and an admin token (no open access)."""
    client = TestClient(create_app(h.controller, api_token="admin-token-for-tests-0123"))
    client.tokens = {name: create_token(h.store, kind=kind, scopes=scopes, now=h.clock.now())[0]  # type: ignore[attr-defined]
                     for name, (kind, scopes) in TENANTS.items()}  # fmt: skip
    return client


def as_(client: TestClient, token: str) -> TestClient:
    client.cookies.set(COOKIE, getattr(client, "tokens", {}).get(token, token))
    return client


# ---------------------------------------------------------------- login


def test_pages_need_a_login_and_the_cookie_is_httponly_and_strict(fleet: tuple[Harness, Job, Job]) -> None:
    h, a, _ = fleet
    client = TestClient(create_app(h.controller, api_token="s3cret"), follow_redirects=False)
    resp = client.get("/jobs", params={"state": "running"})
    assert resp.status_code == 303 and resp.headers["location"] == "/login?next=/jobs%3Fstate%3Drunning"
    fragment = client.get("/ui/jobs", headers={"HX-Request": "true"})
    assert fragment.status_code == 401 and fragment.headers["HX-Redirect"] == "/login?next=/ui/jobs"
    bad = client.post("/login", data={"token": "nope", "next": "/jobs"})
    assert bad.status_code == 401 and "not valid" in bad.text and COOKIE not in bad.headers.get("set-cookie", "")
    empty = client.post("/login", data={"token": " ", "next": "/jobs"})
    assert empty.status_code == 401 and "Enter your API token" in empty.text
    ok = client.post("/login", data={"token": "s3cret", "next": f"/jobs/{a.id}"})
    assert ok.status_code == 303 and ok.headers["location"] == f"/jobs/{a.id}"
    cookie = ok.headers["set-cookie"]
    assert f"{COOKIE}=s3cret" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    page = client.get(f"/jobs/{a.id}")
    assert page.status_code == 200 and "alpha" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    out = client.post("/logout")
    assert out.status_code == 303 and 'spotfleet_token=""' in out.headers["set-cookie"]
    header_only = TestClient(create_app(h.controller, api_token="s3cret"), follow_redirects=False)
    assert header_only.get("/costs", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "jobs", "/\\evil.example"])
def test_after_login_only_a_local_path(fleet: tuple[Harness, Job, Job], target: str) -> None:
    client = TestClient(create_app(fleet[0].controller, api_token="s3cret"), follow_redirects=False)
    assert client.post("/login", data={"token": "s3cret", "next": target}).headers["location"] == "/"


def test_an_open_controller_needs_no_login(fleet: tuple[Harness, Job, Job]) -> None:
    client = TestClient(create_app(fleet[0].controller), follow_redirects=False)
    assert client.get("/").status_code == 200
    assert client.get("/login").headers["location"] == "/"
    assert "Log out" not in client.get("/jobs").text


def test_single_token_resolver() -> None:
    resolve = single_token("s3cret")
    assert resolve("s3cret") is ADMIN and resolve("s3cre") is None and resolve(None) is None
    assert not open_access(resolve) and open_access(single_token(None))
    assert single_token(None)("anything") is ADMIN


# ---------------------------------------------------------------- who sees what


def test_a_tenant_sees_its_jobs_events_instances_and_costs_only(fleet: tuple[Harness, Job, Job]) -> None:
    h, a, b = fleet
    client = as_(scoped(h), "token-of-b")
    jobs = client.get("/jobs").text
    assert b.id in jobs and a.id not in jobs
    assert a.id not in client.get("/ui/jobs", params={"tenant": "a"}).text
    for path in (f"/jobs/{a.id}", f"/ui/jobs/{a.id}/status", f"/ui/jobs/{a.id}/explain", f"/ui/jobs/{a.id}/log"):
        assert client.get(path).status_code == 404, path
    assert "no job with id" in client.get(f"/jobs/{a.id}").text
    assert client.get(f"/jobs/{b.id}").status_code == 200
    events = client.get("/ui/events").text
    assert b.id in events and a.id not in events
    assert "instance." not in events, "instance events belong to no tenant"
    fleet_page = client.get("/").text
    b_instance, a_instance = h.job(b.id).instance_ids[0], h.job(a.id).instance_ids[0]
    assert b_instance in fleet_page and a_instance not in fleet_page
    costs = client.get("/costs").text
    assert 'data-key="b"' in costs and 'data-key="a"' not in costs and "(idle)" not in costs
    focus = client.get("/costs/focus.csv").text
    assert b.id in focus and a.id not in focus
    viewer = as_(scoped(h), "token-of-viewer").get("/jobs").text
    assert a.id in viewer and b.id in viewer


def test_cancel_needs_the_scope_and_the_dashboard_header(fleet: tuple[Harness, Job, Job]) -> None:
    h, a, b = fleet
    hx = {"HX-Request": "true"}
    tenant_b = as_(scoped(h), "token-of-b")
    assert "Cancel job" not in tenant_b.get(f"/jobs/{b.id}").text
    assert tenant_b.post(f"/ui/jobs/{b.id}/cancel", headers=hx).status_code == 403
    assert tenant_b.post(f"/ui/jobs/{a.id}/cancel", headers=hx).status_code == 404
    tenant_a = as_(scoped(h), "token-of-a")
    assert "Cancel job" in tenant_a.get(f"/jobs/{a.id}").text
    assert tenant_a.post(f"/ui/jobs/{a.id}/cancel").status_code == 403, "a cross-site form has no HX-Request"
    assert not h.job(a.id).cancel_requested
    resp = tenant_a.post(f"/ui/jobs/{a.id}/cancel", headers=hx)
    assert resp.status_code == 200 and "cancelling" in resp.text
    assert h.job(a.id).cancel_requested and not h.job(b.id).cancel_requested


# ---------------------------------------------------------------- the numbers


def figures(html: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r'data-figure="(\w+)" data-value="([-0-9.e]+)"', html)}


def test_costs_page_and_downloads_equal_spotfleet_cost_report(fleet: tuple[Harness, Job, Job]) -> None:
    h, a, b = fleet
    for job in (a, b):
        h.report(job, "exited", exit_code=0)
    h.step()
    h.clock.advance(5 * 60)  # past the idle TTL: the fleet scales to zero, every segment closes
    h.step()
    h.step()
    assert not h.live()
    client = TestClient(create_app(h.controller))
    runner = CliRunner()

    def report(*args: str) -> str:
        result = runner.invoke(cli, ["cost", "report", "--db", h.store.url, *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    for by in ("tenant", "market"):
        expected = json.loads(report("--by", by, "--format", "json"))
        page = client.get("/costs", params={"by": by}).text
        shown = figures(page)
        assert shown == {k: expected["totals"][k] for k in shown} and len(shown) == 8
        assert expected["totals"]["cost"] > 0
        assert (
            f'data-figure="cost" data-value="{expected["totals"]["cost"]}">{fmt.money(expected["totals"]["cost"])}<'
            in page
        )
        for row in expected["rows"]:
            assert (
                f'data-key="{row[by]}"><th scope="row">{row[by]}</th><td class="num" data-value="{row["cost"]}">'
                in page
            )
        assert client.get("/costs/report.csv", params={"by": by}).text == report("--by", by, "--format", "csv")
    assert client.get("/costs/report.csv").text == report("--format", "csv")
    assert client.get("/costs/focus.csv").text == report("--format", "focus")
    fleet_page = client.get("/").text
    assert f'data-figure="savings" data-value="{expected["totals"]["savings"]}"' in fleet_page


def test_money_is_written_as_the_cli_writes_it() -> None:
    from spotfleet.cli.cost import _money

    for value in (0.0, 0.00012, 0.5, 1.0, 12.345, 1234567.891, -3.2, None):
        assert fmt.money(value) in (_money(value), "–")
    assert fmt.duration(timedelta(days=1, hours=2)) == "1d 2h" and fmt.duration(61) == "1m 01s"


@pytest.mark.parametrize(
    ("path", "field"),
    [("/costs?by=zone", "by"), ("/costs?since=forever", "since"), ("/costs/report.csv?by=zone", "by"),
     ("/costs/focus.csv?since=x", "since")],
)  # fmt: skip
def test_a_bad_query_is_422_naming_the_field(fleet: tuple[Harness, Job, Job], path: str, field: str) -> None:
    resp = TestClient(create_app(fleet[0].controller)).get(path)
    assert resp.status_code == 422 and f"{field}: " in resp.text


def test_what_the_controller_records_is_escaped(fleet: tuple[Harness, Job, Job]) -> None:
    h, a, _ = fleet
    h.store.add_event(EventRecord(at=h.clock.now(), kind="job.note", message="<script>alert(1)</script>", job_id=a.id))
    html = TestClient(create_app(h.controller)).get("/events").text
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_events_filters(fleet: tuple[Harness, Job, Job]) -> None:
    h, a, b = fleet
    client = TestClient(create_app(h.controller))
    kinds = re.findall(r'data-kind="([\w.]+)"', client.get("/ui/events", params={"kind": "instance."}).text)
    assert kinds and all(k.startswith("instance.") for k in kinds)
    only_a = client.get("/ui/events", params={"job": a.id}).text
    assert a.id in only_a and b.id not in only_a
    only_b = client.get("/ui/events", params={"tenant": "b"}).text
    assert b.id in only_b and a.id not in only_b
    assert "No events match" in client.get("/ui/events", params={"level": "error"}).text


def test_job_page_shows_attempts_explain_and_log_tail(fleet: tuple[Harness, Job, Job]) -> None:
    h, a, _ = fleet
    log = h.controller.job_logs.path(a.id, 1)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"line {i}\n" for i in range(500)))
    client = TestClient(create_app(h.controller))
    page = client.get(f"/jobs/{a.id}").text
    assert 'data-attempt="1"' in page and "job-timeline" in page and "Cancel job" in page
    tail = client.get(f"/ui/jobs/{a.id}/log", params={"lines": 50}).text
    assert "line 499" in tail and "line 450" in tail and "line 449" not in tail
    assert "running on" in client.get(f"/ui/jobs/{a.id}/explain").text
    assert client.get(f"/ui/jobs/{a.id}/log", params={"lines": 5}).status_code == 422


def test_docs_load_nothing_from_elsewhere(fleet: tuple[Harness, Job, Job]) -> None:
    client = TestClient(create_app(fleet[0].controller))
    html = client.get("/docs").text
    urls = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", html)
    assert urls and all(u.startswith("/") for u in urls), urls
    for u in urls:
        assert client.get(u).status_code == 200, u
    assert client.get("/redoc").status_code == 404


def test_a_finished_job_stops_its_page_polling(fleet: tuple[Harness, Job, Job]) -> None:
    h, a, _ = fleet
    client = TestClient(create_app(h.controller))
    assert client.get(f"/ui/jobs/{a.id}/status").status_code == 200
    h.report(a, "exited", exit_code=0)
    h.step()
    assert client.get(f"/ui/jobs/{a.id}/log").status_code == 200, "news may still come"
    h.clock.advance(60)
    for path in (f"/ui/jobs/{a.id}/status", f"/ui/jobs/{a.id}/log"):
        assert client.get(path).status_code == 286, path  # htmx: swap, then stop polling


def test_a_job_not_placed_yet_has_a_page(fleet: tuple[Harness, Job, Job]) -> None:
    h, _, _ = fleet
    waiting = h.submit(name="huge", tenant="a", resources={"gpus": 16})
    h.step()
    client = TestClient(create_app(h.controller))
    page = client.get(f"/jobs/{waiting.id}").text
    assert "Not placed yet" in page and "pending" in page
    assert "pending" in client.get(f"/ui/jobs/{waiting.id}/explain").text


def test_a_filtered_view_is_a_link(fleet: tuple[Harness, Job, Job]) -> None:
    client = TestClient(create_app(fleet[0].controller))
    form = {"HX-Request": "true", "HX-Trigger": "job-filters"}
    resp = client.get("/ui/jobs", params={"state": "running", "tenant": "a", "priority": "bogus"}, headers=form)
    assert resp.headers["HX-Push-Url"] == "/jobs?state=running&tenant=a"
    assert "HX-Push-Url" not in client.get("/ui/jobs", headers={"HX-Request": "true"}).headers, "polls push nothing"
    resp = client.get("/ui/events", params={"kind": "job.", "limit": 50},
                      headers={"HX-Request": "true", "HX-Trigger": "event-filters"})  # fmt: skip
    assert resp.headers["HX-Push-Url"] == "/events?kind=job.&limit=50"


def test_the_live_pages_share_one_ledger_build_for_a_few_seconds(sqlite_store: Store, tmp_path: Path) -> None:
    from spotfleet.web.costs import LedgerCache

    h = make_harness(sqlite_store, tmp_path)
    cache = LedgerCache(h.store, h.clock, ttl=timedelta(seconds=5))
    first = cache.get()
    h.clock.advance(4)
    assert cache.get() is first
    h.clock.advance(1)
    assert cache.get() is not first and cache.get().now == h.clock.now()
