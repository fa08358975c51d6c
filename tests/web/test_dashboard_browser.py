"""The dashboard in a real browser: headless Chromium against a real controller.

One controller for the module — the local provider (real agent and job
processes), SQLite, an admin token — runs a small mixed workload of two
tenants. The tests log in through the form, read the pages as a person would
(waiting on the page's own live refresh, with deadlines), inject a reclaim
through the API and watch it land on the job's timeline, compare the Costs
page with ``spotfleet cost report``, check a tenant token sees only its tenant,
run axe-core for accessibility, walk the pages with the keyboard, and save a
screenshot of every page under build/test-artifacts/screenshots.

Every request the browser makes is checked: anything not addressed to the
controller is blocked and fails the test (nothing may come from the internet).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, BrowserContext, Page, Route, expect
from typer.testing import CliRunner

from spotfleet.api.app import create_app
from spotfleet.api.auth import create_token
from spotfleet.cli.main import app as cli
from spotfleet.config import load_config
from spotfleet.model.spec import parse_spec
from spotfleet.service import Service
from spotfleet.web.fmt import money
from tests.web.browser import AXE, chromium, screenshot_dir

pytestmark = [pytest.mark.e2e, pytest.mark.browser]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ADMIN = "admin-token-for-the-dashboard-tests"
TOKENS: dict[str, str] = {}  # tenant -> a real scoped token, minted by the fleet fixture


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def counter(name: str, tenant: str, steps: int, **extra: object) -> dict[str, object]:
    """A checkpointing job (examples/train_counter.py): saves on the notice, resumes."""
    return {"name": name, "tenant": tenant, "command": ["python", str(EXAMPLES / "train_counter.py"), "--steps",
            str(steps), "--step-seconds", "0.05"], **extra}  # fmt: skip


@dataclass
class Fleet:
    service: Service
    url: str
    db: str
    jobs: dict[str, str]  # name → id
    tenant_url: str = ""
    off_origin: list[str] = field(default_factory=list)

    def job(self, name: str) -> Any:
        return self.service.store.get_job(self.jobs[name])


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("dashboard")
    config = load_config(overrides={
        "data_dir": str(tmp), "api.port": free_port(), "api.token": ADMIN, "reconcile.interval": "0.3s",
        "reconcile.idle_ttl": "2s", "reconcile.heartbeat": "0.3s",
        "providers": {"local": {"heartbeat": "0.3s", "max_instances": 6}},
        "budgets": {"global_per_hour": 20.0, "tenants": {"research": 8.0}},
    })  # fmt: skip
    service = Service(config)
    service.start_background()
    specs = [
        counter("train-a", "research", 400, priority="opportunistic"),
        counter("eval-b", "vision", 40),
        counter("sweep-c", "research", 30, priority="critical"),
        counter("doomed-d", "vision", 600, priority="opportunistic"),
    ]
    ids = {str(s["name"]): service.controller.submit(parse_spec(s)).id for s in specs}
    # The tenant-scoped front end: the same controller and store behind real scoped
    # tokens (spotfleet.api.auth) and an admin token, so nothing is open.
    now = service.controller.clock.now()
    TOKENS["research"] = create_token(service.store, kind="tenant:research", scopes=["read", "submit"], now=now)[0]
    TOKENS["vision"] = create_token(service.store, kind="tenant:vision", scopes=["read"], now=now)[0]
    tenant_app = create_app(service.controller, api_token="admin-token-for-the-dashboard-tests")
    server = uvicorn.Server(uvicorn.Config(tenant_app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for("the tenant front end", lambda: server.started, 20)
    port = server.servers[0].sockets[0].getsockname()[1]
    fl = Fleet(service, service.url, config.database_url, ids, tenant_url=f"http://127.0.0.1:{port}")
    try:
        yield fl
    finally:
        server.should_exit = True
        thread.join(10)
        # the controller first: stopped after the instances, its next step could launch one more
        # (an orphaned local instance seen after a CI run under four workers)
        service.stop()
        for p in service.providers.values():
            p.stop_all()  # type: ignore[attr-defined]
    assert fl.off_origin == [], f"the browser tried to leave the controller: {fl.off_origin}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


def new_context(browser: Browser, fleet: Fleet, *, base: str | None = None, bypass_csp: bool = False) -> BrowserContext:
    """A fresh context that lets the browser reach the controller and nothing else."""
    base = base or fleet.url
    ctx = browser.new_context(base_url=base, viewport={"width": 1360, "height": 900}, bypass_csp=bypass_csp)
    ctx.set_default_timeout(20_000)

    def guard(route: Route) -> None:
        url = route.request.url
        if url.startswith((fleet.url + "/", fleet.tenant_url + "/", "data:")):
            route.continue_()
        else:
            fleet.off_origin.append(url)
            route.abort()

    ctx.route("**/*", guard)
    return ctx


def log_in(ctx: BrowserContext, token: str, path: str = "/") -> Page:
    page = ctx.new_page()
    page.goto(path)
    expect(page).to_have_url(re.compile(r"/login"))
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text("Signed in as")).to_be_visible()
    return page


@pytest.fixture(scope="module")
def admin(browser: Browser, fleet: Fleet) -> Iterator[Page]:
    ctx = new_context(browser, fleet)
    page = log_in(ctx, ADMIN)
    csp_errors: list[str] = []
    page.on("console", lambda m: csp_errors.append(m.text) if "Content Security Policy" in m.text else None)
    yield page
    ctx.close()
    assert csp_errors == [], "the pages' own scripts must run under their CSP"


def shot(page: Page, name: str) -> Path:
    path = screenshot_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, "a screenshot of a rendered page"
    return path


def chart_kinds(page: Page, canvas: str) -> list[str]:
    """The datasets Chart.js drew on a canvas (waits for the chart to exist)."""
    page.wait_for_function("(id) => window.Chart && window.Chart.getChart(document.getElementById(id))", arg=canvas)
    return page.evaluate(
        "(id) => { const c = window.Chart.getChart(document.getElementById(id));"
        " return c ? c.data.datasets.map((d) => d.kind || d.label) : []; }",
        canvas,
    )


# ---------------------------------------------------------------- the pages show the fleet


def test_login_then_the_pages_show_the_submitted_jobs(fleet: Fleet, admin: Page) -> None:
    page = admin
    page.goto("/jobs")
    for name, job_id in fleet.jobs.items():
        row = page.locator(f'#jobs tr[data-job="{job_id}"]')
        expect(row).to_contain_text(name)
    tenants = page.locator("#jobs tbody td:nth-child(3)").all_inner_texts()
    assert sorted(set(tenants)) == ["research", "vision"]
    page.get_by_label("Tenant").select_option("vision")  # htmx re-renders the rows
    expect(page.locator(f'#jobs tr[data-job="{fleet.jobs["train-a"]}"]')).to_have_count(0)
    expect(page.locator(f'#jobs tr[data-job="{fleet.jobs["eval-b"]}"]')).to_have_count(1)
    shot(page, "jobs")

    wait_for("jobs running", lambda: fleet.job("train-a").state.value == "running", 60)
    page.goto("/")
    running_on = fleet.job("train-a").instance_ids[0]
    expect(page.locator(f'#instances tr[data-instance="{running_on}"]')).to_contain_text(fleet.jobs["train-a"])
    expect(page.locator('[data-figure="leader"]')).to_contain_text("leader")
    assert "tenant research" in page.locator("#budgets-h + table").inner_text()
    assert chart_kinds(page, "fleet-gpus") == ["in use", "idle"]
    shot(page, "fleet")


def test_a_reclaim_through_the_api_lands_on_the_job_timeline(fleet: Fleet, admin: Page) -> None:
    page = admin
    job_id = fleet.jobs["train-a"]
    wait_for("train-a at step 40", lambda: (fleet.job("train-a").progress.get("step") or 0) >= 40, 60)
    page.goto(f"/jobs/{job_id}")
    expect(page.locator("#attempts tbody tr")).to_have_count(1)
    expect(page.locator("#log")).to_contain_text("step", timeout=20_000)  # the live log tail
    expect(page.locator("#explain")).to_contain_text("market")  # explain rendered
    instance = fleet.job("train-a").instance_ids[0]
    resp = httpx.post(f"{fleet.url}/v1/instances/{instance}/interrupt", json={"notice_seconds": 8},
                      headers={"Authorization": f"Bearer {ADMIN}"})  # fmt: skip
    assert resp.status_code == 200, resp.text
    # no reload: the page's own refresh brings the notice, the checkpoint and the resume
    first = page.locator('#attempts tr[data-attempt="1"]')
    expect(first.locator('li[data-kind="notice"]')).to_contain_text("spot interruption notice", timeout=30_000)
    expect(first.locator('li[data-kind="checkpoint"]')).to_contain_text("checkpointed", timeout=30_000)
    second = page.locator('#attempts tr[data-attempt="2"]')
    expect(second.locator('li[data-kind="resume"]')).to_contain_text("resumed from step", timeout=40_000)
    assert instance not in second.inner_text(), "resumed elsewhere"
    expect(first).to_contain_text("spot")
    kinds = chart_kinds(page, "job-timeline")
    assert {"notice", "checkpoint", "resume"} <= set(kinds), kinds
    shot(page, "job-timeline")


def test_cancel_from_the_job_page(fleet: Fleet, admin: Page) -> None:
    page = admin
    job_id = fleet.jobs["doomed-d"]
    page.goto(f"/jobs/{job_id}")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator('[data-figure="state"]')).to_have_text("cancelled", timeout=30_000)
    assert fleet.job("doomed-d").state.value == "cancelled"


# ---------------------------------------------------------------- who sees what


def test_a_tenant_token_sees_only_its_tenant(browser: Browser, fleet: Fleet) -> None:
    ctx = new_context(browser, fleet, base=fleet.tenant_url)
    page = log_in(ctx, TOKENS["vision"], "/jobs")
    theirs = [fleet.jobs["train-a"], fleet.jobs["sweep-c"]]
    expect(page.locator(f'#jobs tr[data-job="{fleet.jobs["eval-b"]}"]')).to_have_count(1)
    for job_id in theirs:
        expect(page.locator(f'#jobs tr[data-job="{job_id}"]')).to_have_count(0)
    expect(page.get_by_label("Tenant")).to_have_count(0)  # no tenant filter to try
    page.goto("/jobs?tenant=research")
    expect(page.locator("#jobs tbody")).to_contain_text("No jobs match")
    for path in (f"/jobs/{theirs[0]}", f"/ui/jobs/{theirs[0]}/log", f"/ui/jobs/{theirs[0]}/status"):
        assert page.goto(path).status == 404, path
    page.goto(f"/events?job={theirs[0]}")
    expect(page.locator("#event-rows")).to_contain_text("No events match")
    for path in ("/", "/events", "/costs"):
        page.goto(path)
        body = page.content()
        assert all(j not in body for j in theirs), f"{path} shows another tenant's job"
        assert "research" not in page.locator("main").inner_text(), path
    page.goto("/costs")
    keys = page.locator("#cost-rows tbody tr").evaluate_all("rows => rows.map(r => r.dataset.key)")
    assert keys in ([], ["vision"]), keys
    focus = ctx.request.get("/costs/focus.csv").text()
    assert all(j not in focus for j in theirs) and "research" not in focus
    own = fleet.jobs["eval-b"]
    page.goto(f"/jobs/{own}")
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)  # viewer of its tenant: no cancel
    hx = {"HX-Request": "true"}
    assert ctx.request.post(f"/ui/jobs/{theirs[0]}/cancel", headers=hx).status == 404
    assert ctx.request.post(f"/ui/jobs/{fleet.jobs['doomed-d']}/cancel", headers=hx).status == 403
    assert ctx.request.post(f"/ui/jobs/{own}/cancel").status == 403  # not from the dashboard's scripts
    shot(page, "tenant-view")
    ctx.close()
    ctx = new_context(browser, fleet, base=fleet.tenant_url)
    page = log_in(ctx, TOKENS["research"], "/jobs")
    expect(page.locator(f'#jobs tr[data-job="{theirs[0]}"]')).to_have_count(1)
    assert page.goto(f"/jobs/{own}").status == 404
    ctx.close()


def test_a_wrong_token_is_refused_and_pages_need_a_login(browser: Browser, fleet: Fleet) -> None:
    ctx = new_context(browser, fleet)
    page = ctx.new_page()
    page.goto("/costs")
    expect(page).to_have_url(re.compile(r"/login\?next=/costs"))
    page.get_by_label("API token").fill("not-the-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("That token is not valid here.")
    assert ctx.cookies() == []
    ctx.close()


# ---------------------------------------------------------------- the same numbers as the CLI


def test_the_costs_page_equals_spotfleet_cost_report(fleet: Fleet, admin: Page) -> None:
    store = fleet.service.store
    wait_for("every job finished", lambda: all(fleet.job(n).terminal for n in fleet.jobs), 120)
    wait_for("the fleet scaled to zero", lambda: not store.list_instances(live_only=True), 60)
    runner = CliRunner()

    def report(*args: str) -> str:
        result = runner.invoke(cli, ["cost", "report", "--db", fleet.db, *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    page = admin
    for by in ("tenant", "market"):
        cli_report = json.loads(report("--format", "json", "--by", by))
        page.goto(f"/costs?by={by}")
        shown = page.locator("#cost-totals dd[data-figure]").evaluate_all(
            "els => Object.fromEntries(els.map(e => [e.dataset.figure, e.dataset.value]))"
        )
        for key, value in shown.items():
            assert float(value) == pytest.approx(cli_report["totals"][key], abs=0), key
        assert len(shown) == 8
        assert page.locator('[data-figure="cost"]').inner_text() == money(cli_report["totals"]["cost"])
        assert cli_report["totals"]["cost"] > 0 and cli_report["totals"]["interruption_cost"] >= 0
        rows = page.locator("#cost-rows tbody tr").evaluate_all(
            "rows => rows.map(r => [r.dataset.key, Number(r.querySelector('td[data-value]').dataset.value)])"
        )
        assert rows == [[r[by], r["cost"]] for r in cli_report["rows"]]
        assert chart_kinds(page, "costs-daily")[-1] == "on-demand would be"
        assert page.request.get(f"/costs/report.csv?by={by}").text() == report("--format", "csv", "--by", by)
        if by == "tenant":
            assert {"research", "vision"} <= {r[0] for r in rows}
            shot(page, "costs")
    assert page.request.get("/costs/report.csv").text() == report("--format", "csv")
    assert page.request.get("/costs/focus.csv").text() == report("--format", "focus")


# ---------------------------------------------------------------- what-if, /docs, events


def test_a_simulation_result_opens_as_a_page(fleet: Fleet, admin: Page, tmp_path: Path) -> None:
    from tests.sim.test_sim_cli import write_traces

    traces = write_traces(tmp_path / "traces")
    workload = tmp_path / "w.yaml"
    workload.write_text("jobs:\n  - {name: train, work: 3h, deadline: 7h, resources: {gpus: 1}}\n")
    out = tmp_path / "result.json"
    result = CliRunner().invoke(cli, ["simulate", "--traces", str(traces), "--workload", str(workload),
                                      "--policy", "spotfleet", "--json", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    page = admin
    page.goto("/whatif")
    page.get_by_label("Simulation result (JSON)").set_input_files(str(out))
    page.get_by_role("button", name="Open").click()
    expect(page.locator('#sim-summary [data-figure="cost"]')).to_have_text(money(doc["cost"]))
    kinds = chart_kinds(page, "whatif-zones")
    assert "spot available" in kinds and "spot" in kinds
    chart_kinds(page, "whatif-curves")
    last = page.evaluate("() => { const c = Chart.getChart(document.getElementById('whatif-curves'));"
                         " return c.data.datasets.map((d) => d.data[d.data.length - 1].y); }")  # fmt: skip
    assert last == [doc["curves"][-1]["cost"], doc["curves"][-1]["on_demand"]]
    expect(page.locator("#sim-jobs")).to_contain_text("train")
    shot(page, "whatif")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**doc, "instances": [{"zone": "x"}]}))
    page.get_by_label("Simulation result (JSON)").set_input_files(str(bad))
    page.get_by_role("button", name="Open").click()
    expect(page.get_by_role("alert")).to_contain_text("instances.0.id")


def test_docs_are_served_from_local_assets(admin: Page) -> None:
    page = admin
    page.goto("/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("spotfleet")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()


def test_events_stream_live_with_filters(fleet: Fleet, admin: Page) -> None:
    page = admin
    page.goto("/events?kind=job.")
    kinds = page.locator("#event-rows tr").evaluate_all("rows => rows.map(r => r.dataset.kind)")
    assert kinds and all(k.startswith("job.") for k in kinds)
    job_id = fleet.job("eval-b").id
    page.get_by_label("Job id").fill(job_id)
    expect(page.locator("#event-rows tr").first).to_contain_text(job_id)
    assert all(job_id in t for t in page.locator("#event-rows tr").all_inner_texts())
    # live: a new event appears without a reload
    page.get_by_label("Job id").fill("")
    page.get_by_label("Kind").select_option("job.")
    new = fleet.service.controller.submit(parse_spec(counter("late-e", "vision", 5)))
    expect(page.locator(f'#event-rows tr[data-kind="job.submitted"]:has-text("{new.id}")')).to_have_count(1)
    wait_for("late-e done", lambda: fleet.service.store.get_job(new.id).terminal, 60)
    shot(page, "events")


# ---------------------------------------------------------------- accessibility


PAGES = ["/", "/jobs", "JOB", "/costs", "/events", "/whatif"]


def test_pages_pass_axe_core(browser: Browser, fleet: Fleet) -> None:
    """WCAG 2.1 A/AA rules (labels, contrast, names, landmarks, ...) on every page.
    axe-core is injected, so this context bypasses the pages' CSP."""
    ctx = new_context(browser, fleet, bypass_csp=True)
    page = ctx.new_page()
    page.goto("/login")
    axe = AXE.read_text()
    problems: dict[str, list[str]] = {}

    def check(name: str) -> None:
        page.add_script_tag(content=axe)
        found = page.evaluate(
            "async () => (await axe.run(document, {runOnly: {type: 'tag', values: "
            "['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})).violations"
            ".map((v) => v.id + ': ' + v.nodes.map((n) => n.target.join(' ')).join(', '))"
        )
        if found:
            problems[name] = found

    check("login")
    page.get_by_label("API token").fill(ADMIN)
    page.get_by_role("button", name="Sign in").click()
    for path in PAGES:
        page.goto(f"/jobs/{fleet.jobs['train-a']}" if path == "JOB" else path)
        page.wait_for_load_state("networkidle")
        check(path)
    ctx.close()
    assert problems == {}, json.dumps(problems, indent=2)


def test_keyboard_alone_gets_around(browser: Browser, fleet: Fleet) -> None:
    ctx = new_context(browser, fleet)
    page = ctx.new_page()
    page.goto("/jobs")
    # the sign-in field's `autofocus` is applied at the browser's next rendering
    # opportunity after load, not by goto's return: wait for it (a one-shot read
    # of activeElement failed once in CI), bounded by expect's timeout
    expect(page.locator("#token")).to_be_focused()
    page.keyboard.type(ADMIN)
    # the sign-in page already sits at /jobs, so the URL alone does not say the
    # signed-in page has loaded: wait for that navigation, or the keys below land
    # on a page about to be replaced and the focus resets (failed twice in CI)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/jobs$"))
    expect(page.locator("#state")).to_be_visible()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none", "focus is visible"
    page.keyboard.press("Enter")
    # the fragment's focus move lands after the key event returns: wait for it
    # (a one-shot read of activeElement failed once in CI), bounded by expect's timeout
    expect(page.locator("#main")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator("#state")).to_be_focused()  # then the first filter
    visited = []
    page.goto("/jobs")
    for _ in range(12):
        page.keyboard.press("Tab")
        visited.append(page.evaluate("document.activeElement.textContent.trim()"))
        if visited[-1] == "Costs":
            break
    assert visited[-1] == "Costs", visited
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/costs$"))
    expect(page.locator('nav a[aria-current="page"]')).to_have_text("Costs")
    ctx.close()
