"""Dashboard routes: pages, their htmx fragments, downloads, login, local /docs.

Every handler resolves the request's principal first (``session.principal_of``)
and passes it to the page's data builder, which filters by it — no handler
reads the store unfiltered. A fragment (``/ui/...``) re-renders the part of a
page that changes, and the page polls it with htmx; pages work (without live
refresh) with scripts off, except the charts.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.datastructures import UploadFile

import spotfleet
from spotfleet.api.principal import Principal, PrincipalResolver, open_access
from spotfleet.controller.controller import Controller
from spotfleet.errors import InvalidSpec, NotFound
from spotfleet.model.job import Job
from spotfleet.web import costs, events, fleet, fmt, jobs, session, whatif

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"

# Scripts and styles only from this server; no inline script (chart data rides in
# <script type="application/json">, which is data, not code).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")  # fmt: skip
STOP_POLLING = 286  # htmx swaps this answer, then stops polling the element
SETTLED_AFTER = timedelta(seconds=30)  # a finished job's last log lines and usage have arrived by then
NAV = [("/", "Fleet"), ("/jobs", "Jobs"), ("/costs", "Costs"), ("/events", "Events"), ("/whatif", "What-if")]


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters.update(fmt.FILTERS)
    templates.env.globals.update(version=spotfleet.__version__, nav=NAV)
    return templates


def mount(app: FastAPI, controller: Controller, *, resolve: PrincipalResolver,
          leadership: fleet.Leadership | None = None) -> None:  # fmt: skip
    """Add the dashboard to ``app``: static files, pages, the login redirect, /docs."""
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(build_router(controller, resolve=resolve,
                                    leadership=leadership or fleet.single_replica(controller.cluster)))  # fmt: skip

    @app.exception_handler(session.LoginRequired)
    async def _login(request: Request, exc: session.LoginRequired) -> Response:
        target = session.login_url(exc.next_path)
        if request.headers.get("hx-request") == "true":  # a fragment: have htmx load the login page
            return Response(status_code=401, headers={"HX-Redirect": target})
        return RedirectResponse(target, status_code=303)

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        """Swagger UI from the package's own copy (FastAPI's default loads it from a CDN)."""
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title="spotfleet API",
            swagger_js_url="/static/vendor/swagger-ui-bundle.js", swagger_css_url="/static/vendor/swagger-ui.css",
            swagger_favicon_url="/static/favicon.svg",
        )  # fmt: skip


def build_router(controller: Controller, *, resolve: PrincipalResolver, leadership: fleet.Leadership) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    templates = _templates()
    store = controller.store
    anonymous_ok = open_access(resolve)
    live_ledger = costs.LedgerCache(store, controller.clock)

    def who(request: Request) -> Principal:
        return session.principal_of(request, resolve)

    def page(request: Request, name: str, context: dict[str, Any], *, status: int = 200) -> HTMLResponse:
        context = {"principal": context.get("principal"), "can_logout": not anonymous_ok,
                   "path": request.url.path, **context}  # fmt: skip
        resp = templates.TemplateResponse(request, name, context, status_code=status)
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Cache-Control"] = "no-store"
        return resp

    def linkable(request: Request, resp: Response, form: str, path: str, query: dict[str, str]) -> Response:
        """When a filter form asked, put the filters in the address bar: a filtered view is a link."""
        if request.headers.get("hx-trigger") == form:
            resp.headers["HX-Push-Url"] = path + (f"?{urlencode(query)}" if query else "")
        return resp

    def error(request: Request, principal: Principal | None, status: int, message: str) -> HTMLResponse:
        return page(request, "error.html", {"principal": principal, "status": status, "message": message},
                    status=status)  # fmt: skip

    # ------------------------------------------------------------ login

    @router.get("/login")
    def login_form(request: Request, next: str = "/") -> Response:
        if anonymous_ok:
            return RedirectResponse("/", status_code=303)
        return page(request, "login.html", {"next": session.safe_next(next), "error": None})

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await request.form()
        token = str(form.get("token") or "").strip()
        target = session.safe_next(str(form.get("next") or "/"))
        if not token or resolve(token) is None:
            message = "Enter your API token." if not token else "That token is not valid here."
            return page(request, "login.html", {"next": target, "error": message}, status=401)
        resp = RedirectResponse(target, status_code=303)
        resp.set_cookie(session.COOKIE, token, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")  # fmt: skip
        return resp

    @router.post("/logout")
    def logout() -> Response:
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(session.COOKIE, path="/")
        return resp

    # ------------------------------------------------------------ fleet

    def fleet_context(principal: Principal) -> dict[str, Any]:
        view = fleet.fleet_view(store, principal, now=controller.clock.now(), budgets=controller.budgets,
                                leadership=leadership, ledger=live_ledger.get())  # fmt: skip
        return {"principal": principal, "fleet": view, "providers": sorted(controller.providers)}

    @router.get("/")
    def fleet_page(request: Request) -> Response:
        return page(request, "fleet.html", fleet_context(who(request)))

    @router.get("/ui/fleet")
    def fleet_fragment(request: Request) -> Response:
        return page(request, "_fleet.html", fleet_context(who(request)))

    # ------------------------------------------------------------ jobs

    def job_filters(state: str, tenant: str, priority: str, q: str) -> jobs.JobFilters:
        return jobs.JobFilters(state=state if state in jobs.STATES else "", tenant=tenant.strip(),
                               priority=priority if priority in jobs.PRIORITIES else "", q=q.strip()[:100])  # fmt: skip

    @router.get("/jobs")
    def jobs_page(request: Request, state: str = "", tenant: str = "", priority: str = "", q: str = "") -> Response:
        principal = who(request)
        filters = job_filters(state, tenant, priority, q)
        return page(request, "jobs.html", {
            "principal": principal, "filters": filters, "jobs": jobs.list_jobs(store, principal, filters),
            "states": jobs.STATES, "priorities": jobs.PRIORITIES, "tenants": jobs.tenants(store, principal),
            "now": controller.clock.now(),
        })  # fmt: skip

    @router.get("/ui/jobs")
    def jobs_fragment(request: Request, state: str = "", tenant: str = "", priority: str = "",
                      q: str = "") -> Response:  # fmt: skip
        principal = who(request)
        filters = job_filters(state, tenant, priority, q)
        resp = page(request, "_job_rows.html", {"principal": principal, "filters": filters,
                                                "jobs": jobs.list_jobs(store, principal, filters),
                                                "now": controller.clock.now()})  # fmt: skip
        return linkable(request, resp, "job-filters", "/jobs", filters.query())

    def job_context(principal: Principal, job_id: str) -> dict[str, Any]:
        job = jobs.visible_job(store, principal, job_id)
        now = controller.clock.now()
        lines = jobs.attempts(store, job, ledger=live_ledger.get())
        return {"principal": principal, "job": job, "attempts": lines, "progress": jobs.progress(job),
                "timeline": jobs.timeline_chart(lines, now=now), "now": now,
                "events": store.events(job_id=job.id, limit=30)[::-1]}  # fmt: skip

    @router.get("/jobs/{job_id}")
    def job_page(request: Request, job_id: str) -> Response:
        principal = who(request)
        try:
            return page(request, "job.html", job_context(principal, job_id))
        except NotFound as exc:
            return error(request, principal, 404, str(exc))

    @router.get("/ui/jobs/{job_id}/status")
    def job_status(request: Request, job_id: str) -> Response:
        principal = who(request)
        try:
            context = job_context(principal, job_id)
        except NotFound as exc:
            return PlainTextResponse(str(exc), status_code=404)
        return page(request, "_job_status.html", context, status=200 if live(context["job"]) else STOP_POLLING)

    def live(job: Job) -> bool:
        """Worth polling: not finished, or finished so recently that news may still come."""
        return not job.terminal or controller.clock.now() - job.state_since < SETTLED_AFTER

    @router.get("/ui/jobs/{job_id}/explain")
    def job_explain(request: Request, job_id: str) -> Response:
        principal = who(request)
        try:
            jobs.visible_job(store, principal, job_id)
            data = controller.explain(job_id)
        except NotFound as exc:
            return PlainTextResponse(str(exc), status_code=404)
        return page(request, "_explain.html", {"principal": principal, "x": data})

    @router.get("/ui/jobs/{job_id}/log")
    def job_log(request: Request, job_id: str, lines: Annotated[int, Query(ge=10, le=2000)] = 200) -> Response:
        principal = who(request)
        try:
            job = jobs.visible_job(store, principal, job_id)
        except NotFound as exc:
            return PlainTextResponse(str(exc), status_code=404)
        return page(request, "_log.html", {"principal": principal, "job": job,
                                           "log": jobs.log_tail(controller.job_logs.path, job, lines=lines)},
                    status=200 if live(job) else STOP_POLLING)  # fmt: skip

    @router.post("/ui/jobs/{job_id}/cancel")
    def job_cancel(request: Request, job_id: str) -> Response:
        principal = who(request)
        session.require_htmx(request)
        try:
            jobs.visible_job(store, principal, job_id)
        except NotFound as exc:
            return PlainTextResponse(str(exc), status_code=404)
        if not principal.can_cancel:
            return PlainTextResponse(f"{principal.name} may not cancel jobs", status_code=403)
        controller.cancel(job_id)
        return page(request, "_job_status.html", job_context(principal, job_id))

    # ------------------------------------------------------------ costs

    def cost_or_error(request: Request, principal: Principal, by: str, since: str) -> costs.CostView | HTMLResponse:
        try:
            return costs.cost_view(store, principal, now=controller.clock.now(), by=by, since=since)
        except InvalidSpec as exc:
            return error(request, principal, 422, str(exc))

    @router.get("/costs")
    def costs_page(request: Request, by: str = "tenant", since: str = "") -> Response:
        principal = who(request)
        view = cost_or_error(request, principal, by, since)
        if isinstance(view, HTMLResponse):
            return view
        return page(request, "costs.html", {"principal": principal, "view": view, "groupings": costs.GROUPINGS,
                                            "windows": costs.WINDOWS})  # fmt: skip

    def download(body: str, name: str) -> Response:
        return Response(body, media_type="text/csv; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})  # fmt: skip

    @router.get("/costs/report.csv")
    def costs_csv(request: Request, by: str = "", since: str = "") -> Response:
        principal = who(request)
        try:
            start = costs.parse_since(since, now=controller.clock.now())
            if by and by not in costs.GROUPINGS:
                raise InvalidSpec("by", f"group by {' or '.join(costs.GROUPINGS)}, not {by!r}")
        except InvalidSpec as exc:
            return PlainTextResponse(str(exc), status_code=422)
        data = costs.ledger(store, now=controller.clock.now(), since=start)
        report = costs.report(data, principal, by=[by] if by else [], since=start)
        return download(costs.report_csv(report), f"spotfleet-costs{'-by-' + by if by else ''}.csv")

    @router.get("/costs/focus.csv")
    def costs_focus(request: Request, since: str = "") -> Response:
        principal = who(request)
        try:
            start = costs.parse_since(since, now=controller.clock.now())
        except InvalidSpec as exc:
            return PlainTextResponse(str(exc), status_code=422)
        data = costs.ledger(store, now=controller.clock.now(), since=start)
        return download(costs.focus_csv(costs.report(data, principal, since=start)), "spotfleet-focus.csv")

    # ------------------------------------------------------------ events

    def event_filters(kind: str, level: str, job: str, instance: str, tenant: str, limit: int) -> events.EventFilters:
        return events.EventFilters(kind=kind if kind in events.KINDS else "", level=level if level in events.LEVELS
                                   else "", job=job.strip()[:64], instance=instance.strip()[:64],
                                   tenant=tenant.strip()[:64], limit=limit)  # fmt: skip

    @router.get("/events")
    def events_page(request: Request, kind: str = "", level: str = "", job: str = "", instance: str = "",
                    tenant: str = "", limit: int = 200) -> Response:  # fmt: skip
        principal = who(request)
        filters = event_filters(kind, level, job, instance, tenant, limit)
        return page(request, "events.html", {"principal": principal, "filters": filters, "kinds": events.KINDS,
                                             "levels": events.LEVELS, "limits": events.LIMITS,
                                             "events": events.list_events(store, principal, filters)})  # fmt: skip

    @router.get("/ui/events")
    def events_fragment(request: Request, kind: str = "", level: str = "", job: str = "", instance: str = "",
                        tenant: str = "", limit: int = 200) -> Response:  # fmt: skip
        principal = who(request)
        filters = event_filters(kind, level, job, instance, tenant, limit)
        resp = page(request, "_event_rows.html", {"principal": principal,
                                                  "events": events.list_events(store, principal, filters)})  # fmt: skip
        return linkable(request, resp, "event-filters", "/events", filters.query())

    # ------------------------------------------------------------ what-if

    @router.get("/whatif")
    def whatif_page(request: Request) -> Response:
        return page(request, "whatif.html", {"principal": who(request), "doc": None, "error": None})

    @router.post("/whatif")
    async def whatif_open(request: Request) -> Response:
        principal = who(request)
        form = await request.form(max_files=1, max_fields=4, max_part_size=whatif.MAX_BYTES)
        upload = form.get("result")
        if not isinstance(upload, UploadFile):
            return page(request, "whatif.html", {"principal": principal, "doc": None,
                                                 "error": "result: choose a JSON file to open"}, status=422)  # fmt: skip
        raw = await upload.read(whatif.MAX_BYTES + 1)
        try:
            doc = whatif.parse(raw, source=upload.filename or "upload")
        except InvalidSpec as exc:
            return page(request, "whatif.html", {"principal": principal, "doc": None, "error": str(exc)}, status=422)
        return page(request, "whatif.html", {"principal": principal, "doc": doc, "charts": whatif.charts(doc),
                                             "name": upload.filename, "error": None})  # fmt: skip

    return router
