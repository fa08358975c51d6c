"""The FastAPI application.

- Users: ``POST /v1/jobs`` (a JobSpec as JSON), ``GET /v1/jobs``, ``GET /v1/jobs/{id}``,
  ``POST /v1/jobs/{id}/cancel``, ``GET /v1/jobs/{id}/logs``, ``GET /v1/instances``,
  ``GET /v1/events``, ``GET /v1/summary`` (spend, fleet, jobs by tenant, budgets,
  notable events, controller health), ``POST /v1/fleet/down`` and ``/v1/fleet/resume``.
- Agents: ``POST /v1/agent/register``, ``/v1/agent/heartbeat``, ``/v1/agent/logs``,
  authenticated by their per-instance bearer token.
- ``GET /healthz`` (liveness), ``GET /readyz`` (the database answers), both with the
  replica's ``role``, ``epoch`` and the ``leader``; ``GET /metrics`` (Prometheus, see ``spotfleet.metrics``).
- The dashboard at ``/`` and Swagger UI at ``/docs``, both from local assets
  (``spotfleet.web``), behind the same tokens (``spotfleet.api.principal``).

A client's mistake is a 4xx naming the field (422 for an invalid spec, 404 for
an unknown id, 401 for a bad token), never a 500.
"""

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi import Path as Path_
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

import spotfleet
from spotfleet.api import auth, limits
from spotfleet.api.principal import Principal, PrincipalResolver
from spotfleet.api.views import instance_view, job_view, partition_view
from spotfleet.controller.agents import Forbidden, Unauthorized
from spotfleet.controller.controller import Controller
from spotfleet.errors import InvalidSpec, NotFound
from spotfleet.ledger.usage import load_usage
from spotfleet.metrics import CONTENT_TYPE, FleetMetrics
from spotfleet.model.events import NoticeKind
from spotfleet.model.job import JobState
from spotfleet.model.spec import JobSpec, check_submission, parse_spec
from spotfleet.overview import overview
from spotfleet.spend import summarize
from spotfleet.web import routes as web
from spotfleet.wire import Heartbeat, HeartbeatResponse, LogChunk, RegisterRequest


class DownRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grace_seconds: float = Field(120.0, ge=0, le=3600, description="time jobs get to checkpoint")
    reason: str = Field("spotfleet down", max_length=200)


class InterruptRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: NoticeKind = NoticeKind.SPOT_INTERRUPTION
    notice_seconds: float = Field(120.0, ge=0, le=3600)


_SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "a job spec (docs/reference.md#job-spec)",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}}},
    }
}

_BATCH_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "several job specs, submitted all or none",
        "content": {"application/json": {"schema": {
            "type": "object", "required": ["jobs"], "additionalProperties": False,
            "properties": {"jobs": {"type": "array", "minItems": 1, "maxItems": 10000,
                                    "items": {"$ref": "#/components/schemas/JobSpec"}}},
        }}},
    }
}  # fmt: skip


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(..., max_length=80, description="admin, viewer or tenant:<name>")
    scopes: list[Literal["read", "submit"]] | None = Field(None, max_length=2, description="tenant tokens only")
    name: str = Field("", max_length=200)


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise HTTPException(401, "missing bearer token (Authorization: Bearer ...)")
    return authorization.split(" ", 1)[1].strip()


def _forbid(message: str) -> HTTPException:
    return HTTPException(403, message)


def create_app(
    controller: Controller,
    *,
    api_token: str | None = None,
    principals: PrincipalResolver | None = None,
    leadership: Callable[[], dict[str, Any]] | None = None,
    max_body: int = limits.DEFAULT_MAX_BODY,
    published_steps: Callable[[], dict[str, Any]] | None = None,
) -> FastAPI:
    """``principals`` decides who a token is (default: the one optional ``api_token``);
    ``leadership`` tells the dashboard which replica leads (default: this one, alone);
    ``published_steps``: an API worker's (``spotfleet.api.workers``) view of the
    step process's step histogram (default: time this process's own steps)."""
    resolve = principals or auth.token_resolver(
        controller.store, legacy_token=api_token, open_without_token=api_token is None
    )
    # /docs is served by the dashboard from the package's own Swagger UI copy (no CDN)
    app = FastAPI(title="spotfleet", version=spotfleet.__version__, docs_url=None, redoc_url=None)
    app.add_middleware(limits.BoundedInput, max_body=max_body)

    bearer = HTTPBearer(auto_error=False, description="an API token (`spotfleet token create`) or an agent token")

    def principal(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
                  authorization: Annotated[str | None, Header(include_in_schema=False)] = None) -> Principal:  # fmt: skip
        token = None if authorization is None else _bearer(authorization)
        who = resolve(token)
        if who is None:
            raise HTTPException(401, "missing bearer token" if token is None else "invalid API token")
        return who

    def reader(who: Annotated[Principal, Depends(principal)]) -> Principal:
        if who.is_agent or not who.can_read:
            raise _forbid(f"{who.name} may not read the API")
        return who

    def fleet_reader(who: Annotated[Principal, Depends(reader)]) -> Principal:
        if not who.all_tenants:
            raise _forbid(f"{who.name} sees its own tenant only; this needs an admin or viewer token")
        return who

    def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
        if not who.is_admin:
            raise _forbid(f"{who.name} is not an admin token")
        return who

    def agent(authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
              _creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)] = None) -> str:  # fmt: skip
        """The agent routes' bearer token (401 when there is none). Whose it is, the
        route's own transaction finds out (``as_agent``): looking it up here too cost
        every heartbeat a second database round trip."""
        token = _bearer(authorization)
        if not token:
            raise HTTPException(401, "unknown or retired agent token")
        return token

    def as_agent(token: str, call: Callable[[], Any]) -> Any:
        """Run an agent route; a token of no live instance is a 401, or a 403 when it
        is a user's token (resolved only then, off the heartbeat's path)."""
        try:
            return call()
        except Forbidden:
            raise
        except Unauthorized:
            who = resolve(token)
            if who is not None and not who.is_agent:
                raise _forbid(f"{who.name} is not an agent token") from None
            raise HTTPException(401, "unknown or retired agent token") from None

    def visible_job(job_id: str, who: Principal) -> Any:
        job = controller.store.get_job(job_id)
        if not who.sees(job.spec.tenant):
            raise NotFound(f"no job {job_id!r}")
        return job

    User = Annotated[Principal, Depends(reader)]

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        lines = []
        for item in exc.errors():
            loc = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
            lines.append(f"{loc}: {item.get('msg', 'invalid')}")
        first = exc.errors()[0] if exc.errors() else {}
        field = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(status_code=422, content={"error": lines[0] if lines else "invalid request",
                                                      "field": field, "errors": lines})  # fmt: skip

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"error": str(exc)})

    @app.exception_handler(Unauthorized)
    async def _unauthorized(_request: Request, exc: Unauthorized) -> JSONResponse:
        return JSONResponse(status_code=403 if isinstance(exc, Forbidden) else 401, content={"error": str(exc)})

    def _role() -> dict[str, Any]:
        """role (leader | follower), epoch and the leader's identity (``store/election.py``)."""
        ha = controller.elector.status() if controller.elector is not None else None
        if ha is None:
            return {"role": "leader", "epoch": None, "leader": None, "leader_url": None}
        leader = ha["leader"]
        return {"role": ha["role"], "epoch": ha["epoch"], "replica": ha["identity"],
                "leader": leader.get("holder"), "leader_url": leader.get("url")}  # fmt: skip

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """Liveness: the process serves HTTP (followers included); ``process`` is the
        answering process's pid (an API worker's, with ``api.workers``)."""
        return {"ok": True, "version": spotfleet.__version__, "cluster": controller.cluster, "process": os.getpid(),
                **_role()}  # fmt: skip

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        """Readiness: the database answers; 503 otherwise. Followers are ready: they
        serve reads and the inbox (submissions, cancels, agent heartbeats)."""
        try:
            controller.store.ping()
        except Exception as exc:  # any database failure means "not ready", reported, not raised
            return JSONResponse(status_code=503, content={"ready": False, "error": str(exc).splitlines()[0],
                                                          **_role()})  # fmt: skip
        return JSONResponse(content={"ready": True, **_role()})

    metrics = FleetMetrics(controller.store, controller.clock, published_steps=published_steps)
    metrics.instrument(controller)

    @app.get("/metrics", dependencies=[Depends(fleet_reader)])
    def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def submission(request: Request, who: Principal) -> Any:
        """The body of a submission, once the caller may submit at all (else 403; a
        body over the limits raises ``BodyRefused``)."""
        if who.is_agent or not who.can_submit:
            raise _forbid(f"{who.name} may not submit jobs")
        return limits.parse_strict(await request.body(), allow_nul=True)  # the spec names the field

    def admit(item: Any, known_gpus: frozenset[str]) -> JobSpec:
        """A valid spec for now and the known GPUs (``InvalidSpec`` naming the field)."""
        spec = parse_spec(item)
        check_submission(spec, now=controller.clock.now(), known_gpus=known_gpus)
        return spec

    def may_submit_for(who: Principal, specs: list[JobSpec]) -> None:
        for spec in specs:
            if not who.sees(spec.tenant):
                raise _forbid(f"{who.name} may not submit for tenant {spec.tenant!r}")

    @app.post("/v1/jobs", status_code=201, openapi_extra=_SPEC_BODY,
              responses={422: {"description": "an invalid spec, naming the field"}})  # fmt: skip
    async def submit(request: Request, who: Annotated[Principal, Depends(principal)]) -> JSONResponse:
        try:
            spec = admit(await submission(request, who), controller.known_gpus())
        except limits.BodyRefused as exc:
            return JSONResponse(status_code=exc.status, content={"error": str(exc)})
        except InvalidSpec as exc:
            return JSONResponse(status_code=422, content={"error": exc.lines()[0], "field": exc.field,
                                                          "errors": exc.lines()})  # fmt: skip
        may_submit_for(who, [spec])
        job = controller.submit(spec)
        return JSONResponse(status_code=201, content=job_view(job, detail=True))

    @app.post("/v1/jobs/batch", status_code=201, openapi_extra=_BATCH_BODY,
              responses={422: {"description": "an invalid spec, naming jobs[i].field"}})  # fmt: skip
    async def submit_batch(request: Request, who: Annotated[Principal, Depends(principal)]) -> JSONResponse:
        """``{"jobs": [spec, ...]}``: all valid → all submitted in one transaction
        (201, the jobs in order); any invalid → none (422 naming ``jobs[i].field``)."""
        try:
            body = await submission(request, who)
        except limits.BodyRefused as exc:
            return JSONResponse(status_code=exc.status, content={"error": str(exc)})
        items = body.get("jobs") if isinstance(body, dict) else None
        if not isinstance(items, list) or not items or len(items) > 10000:
            return JSONResponse(status_code=400, content={"error": 'the body must be {"jobs": [spec, ...]} '
                                                                   "with 1 to 10000 job specs"})  # fmt: skip
        specs, errors, known = [], [], controller.known_gpus()
        for i, item in enumerate(items):
            try:
                specs.append(admit(item, known))
            except InvalidSpec as exc:
                errors += [f"jobs[{i}].{line}" for line in exc.lines()]
        if errors:
            return JSONResponse(status_code=422, content={"error": errors[0], "errors": errors})
        may_submit_for(who, specs)
        jobs = controller.submit_many(specs)
        return JSONResponse(status_code=201, content=[job_view(job, detail=True) for job in jobs])

    @app.get("/v1/jobs", response_model=list[dict[str, Any]])
    def list_jobs(
        who: User,
        state: Annotated[list[JobState] | None, Query()] = None,
        tenant: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
        offset: Annotated[int, Query(ge=0, le=limits.MAX_QUERY_INT)] = 0,
    ) -> JSONResponse:
        """The newest ``limit`` jobs matching the filters (oldest first), skipping the
        ``offset`` newest: page back with ``offset += limit``. Filtered and paged in
        SQL; ``X-Total-Count`` says how many match. A tenant token sees its tenant only."""
        if not who.all_tenants:
            if tenant is not None and tenant != who.tenant:
                return JSONResponse([], headers={"X-Total-Count": "0"})
            tenant = who.tenant
        jobs = controller.store.list_jobs(states=state, tenant=tenant, limit=limit, offset=offset, newest=True)
        total = str(controller.store.count_jobs(states=state, tenant=tenant))
        # views are JSON already: FastAPI's jsonable_encoder walk cost 60 ms per 1,000 jobs
        return JSONResponse([job_view(j) for j in jobs], headers={"X-Total-Count": total})

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: str, who: User) -> dict[str, Any]:
        job = visible_job(job_id, who)
        out = job_view(job, detail=True)
        usage = load_usage(controller.store, [job_id])
        out["attempts"] = [
            {**{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in a.items()},
             **partition_view(usage.get((job_id, a["attempt"], a["node_rank"])))}
            for a in controller.store.job_attempts(job_id)
        ]  # fmt: skip
        out["events"] = [
            {"at": e.at.isoformat(), "kind": e.kind, "level": e.level, "message": e.message}
            for e in controller.store.events(job_id=job_id, limit=30)
        ]
        return out

    @app.get("/v1/jobs/{job_id}/explain")
    def explain(job_id: str, who: User) -> dict[str, Any]:
        visible_job(job_id, who)
        return controller.explain(job_id)

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel(job_id: str, who: User) -> dict[str, Any]:
        visible_job(job_id, who)
        if not who.can_cancel:
            raise _forbid(f"{who.name} may not cancel jobs")
        return job_view(controller.cancel(job_id))

    @app.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse)
    def logs(
        job_id: str,
        who: User,
        attempt: Annotated[int | None, Query(ge=1, le=limits.MAX_QUERY_INT)] = None,
        offset: Annotated[int | None, Query(ge=0, le=limits.MAX_QUERY_INT)] = None,
        node: Annotated[int, Query(ge=0, le=limits.MAX_QUERY_INT)] = 0,
    ) -> Response:
        """All attempts' logs as text; with ``attempt`` and ``offset``, the raw
        bytes of one attempt from that byte on (what ``logs --follow`` polls)."""
        visible_job(job_id, who)
        if offset is not None:
            if attempt is None:
                raise HTTPException(422, "offset needs attempt")
            data = controller.log_bytes(job_id, attempt=attempt, offset=offset, node_rank=node)
            return Response(data, media_type="application/octet-stream")
        return PlainTextResponse(controller.logs(job_id, attempt=attempt))

    @app.get("/v1/instances")
    def instances(who: User, all: bool = False) -> list[dict[str, Any]]:
        shown = controller.store.list_instances(live_only=not all)
        if not who.all_tenants:  # a tenant sees the instances its jobs hold
            held = {i for j in controller.store.list_jobs(tenant=who.tenant) for i in j.instance_ids}
            shown = [i for i in shown if i.id in held]
        return [instance_view(i) for i in shown]

    @app.post("/v1/instances/{instance_id}/interrupt", dependencies=[Depends(admin)])
    def interrupt(instance_id: str, body: InterruptRequest) -> dict[str, Any]:
        """Inject a reclaim notice (local provider): see ``spotfleet local interrupt``."""
        try:
            deadline = controller.interrupt(instance_id, kind=body.kind, notice=timedelta(seconds=body.notice_seconds))
        except InvalidSpec as exc:
            raise HTTPException(409, str(exc)) from None
        return {"instance": instance_id, "kind": body.kind.value, "deadline": deadline.isoformat()}

    @app.get("/v1/events")
    def events(who: User, limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> list[dict[str, Any]]:
        return [
            {"at": e.at.isoformat(), "kind": e.kind, "level": e.level, "message": e.message,
             "job_id": e.job_id, "instance_id": e.instance_id}
            for e in controller.store.events(limit=limit, tenant=who.tenant)
        ]  # fmt: skip

    @app.get("/v1/summary", dependencies=[Depends(fleet_reader)])
    def summary() -> dict[str, Any]:
        now = controller.clock.now()
        hold = controller.store.fleet_hold(controller.cluster)
        out = summarize(controller.store, now=now).to_dict()
        out.update(overview(controller.store, now=now, budgets=controller.budgets, hold=hold))
        out["controller"] = {"cluster": controller.cluster, "version": spotfleet.__version__, "role": "single",
                             **controller.health()}  # fmt: skip
        return out

    @app.post("/v1/fleet/down", dependencies=[Depends(admin)])
    def down(body: DownRequest) -> dict[str, Any]:
        hold = controller.down(grace=timedelta(seconds=body.grace_seconds), reason=body.reason)
        live = controller.store.list_instances(live_only=True)
        return {"since": hold.since.isoformat(), "reason": hold.reason, "grace_seconds": hold.grace_seconds,
                "instances": len(live)}  # fmt: skip

    @app.post("/v1/fleet/resume", dependencies=[Depends(admin)])
    def resume() -> dict[str, Any]:
        return {"resumed": controller.resume()}

    @app.get("/v1/whoami")
    def whoami(who: Annotated[Principal, Depends(principal)]) -> dict[str, Any]:
        return {"name": who.name, "kind": who.kind, "tenant": who.tenant, "instance": who.instance_id,
                "can_read": who.can_read and not who.is_agent, "can_submit": who.can_submit,
                "can_cancel": who.can_cancel, "admin": who.is_admin}  # fmt: skip

    @app.get("/v1/tokens", dependencies=[Depends(admin)])
    def list_tokens(revoked: bool = False) -> list[dict[str, Any]]:
        return [t.to_dict() for t in controller.store.tokens(include_revoked=revoked)]

    @app.post("/v1/tokens", status_code=201, dependencies=[Depends(admin)])
    def create_token(body: TokenRequest) -> JSONResponse:
        try:
            token, record = auth.create_token(controller.store, kind=body.kind, name=body.name,
                                              scopes=list(body.scopes) if body.scopes else None,
                                              now=controller.clock.now())  # fmt: skip
        except InvalidSpec as exc:
            return JSONResponse(status_code=422, content={"error": exc.lines()[0], "field": exc.field})
        return JSONResponse(status_code=201, content={**record.to_dict(), "token": token})

    @app.delete("/v1/tokens/{token_id}", dependencies=[Depends(admin)])
    def revoke_token(token_id: Annotated[str, Path_(max_length=32, pattern=r"^[0-9a-f]{1,32}$")]) -> dict[str, Any]:
        if not controller.store.revoke_token(token_id, at=controller.clock.now()):
            raise NotFound(f"no live token {token_id!r}")
        return {"revoked": token_id}

    @app.post("/v1/agent/register")
    def register(body: RegisterRequest, token: Annotated[str, Depends(agent)]) -> HeartbeatResponse:
        return as_agent(token, lambda: controller.agents.register(token, body))  # type: ignore[no-any-return]

    @app.post("/v1/agent/heartbeat", response_model=HeartbeatResponse)
    def heartbeat(body: Heartbeat, token: Annotated[str, Depends(agent)]) -> Response:
        """One database transaction: the token's instance, its jobs and the writes.
        The answer is serialized once, by its own model (FastAPI's response-model
        pass would validate and encode it again: a third of a heartbeat's CPU)."""
        answer: HeartbeatResponse = as_agent(token, lambda: controller.agents.heartbeat(token, body))
        return Response(answer.model_dump_json(), media_type="application/json")

    @app.post("/v1/agent/logs")
    def agent_logs(body: LogChunk, token: Annotated[str, Depends(agent)]) -> dict[str, int]:
        return {"size": as_agent(token, lambda: controller.agents.append_log(token, body))}

    web.mount(app, controller, resolve=auth.users_only(resolve), leadership=leadership)

    def openapi() -> dict[str, Any]:
        """FastAPI's schema plus ``JobSpec`` (the submit body is read by hand, so
        that an invalid spec is a 422 naming the field in the spec's own words)."""
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            spec = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(spec.pop("$defs", {}))
            components["JobSpec"] = spec
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
