"""The FastAPI application.

- Users: ``POST /v1/jobs`` (a JobSpec as JSON), ``GET /v1/jobs``, ``GET /v1/jobs/{id}``,
  ``POST /v1/jobs/{id}/cancel``, ``GET /v1/jobs/{id}/logs``, ``GET /v1/instances``,
  ``GET /v1/events``, ``GET /v1/summary``.
- Agents: ``POST /v1/agent/register``, ``/v1/agent/heartbeat``, ``/v1/agent/logs``,
  authenticated by their per-instance bearer token.
- ``GET /healthz``; ``GET /metrics`` (Prometheus, see ``spotfleet.metrics``).

A client's mistake is a 4xx naming the field (422 for an invalid spec, 404 for
an unknown id, 401 for a bad token), never a 500.
"""

import hmac
from datetime import timedelta
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

import spotfleet
from spotfleet.api.views import instance_view, job_view
from spotfleet.controller.controller import Controller, Unauthorized
from spotfleet.errors import InvalidSpec, NotFound
from spotfleet.metrics import CONTENT_TYPE, FleetMetrics
from spotfleet.model.events import NoticeKind
from spotfleet.model.job import JobState
from spotfleet.model.spec import parse_spec
from spotfleet.spend import summarize
from spotfleet.wire import Heartbeat, HeartbeatResponse, LogChunk, RegisterRequest


class InterruptRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: NoticeKind = NoticeKind.SPOT_INTERRUPTION
    notice_seconds: float = Field(120.0, ge=0, le=3600)


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise HTTPException(401, "missing bearer token (Authorization: Bearer ...)")
    return authorization.split(" ", 1)[1].strip()


def create_app(controller: Controller, *, api_token: str | None = None) -> FastAPI:
    app = FastAPI(title="spotfleet", version=spotfleet.__version__)

    def require_user(authorization: Annotated[str | None, Header()] = None) -> None:
        if api_token is None:
            return
        if not hmac.compare_digest(_bearer(authorization), api_token):
            raise HTTPException(401, "invalid API token")

    def agent_token(authorization: Annotated[str | None, Header()] = None) -> str:
        return _bearer(authorization)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(status_code=422, content={"error": f"{loc}: {first.get('msg', 'invalid')}", "field": loc})

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(status_code=404, content={"error": str(exc)})

    @app.exception_handler(Unauthorized)
    async def _unauthorized(_request: Request, exc: Unauthorized) -> JSONResponse:
        return JSONResponse(status_code=401, content={"error": str(exc)})

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "version": spotfleet.__version__, "cluster": controller.cluster}

    metrics = FleetMetrics(controller.store, controller.clock)
    metrics.instrument(controller)

    @app.get("/metrics", dependencies=[Depends(require_user)])
    def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.post("/v1/jobs", status_code=201, dependencies=[Depends(require_user)])
    async def submit(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(status_code=400, content={"error": "the body must be a JSON job spec"})
        try:
            spec = parse_spec(body)
        except InvalidSpec as exc:
            return JSONResponse(status_code=422, content={"error": str(exc), "field": exc.field})
        job = controller.submit(spec)
        return JSONResponse(status_code=201, content=job_view(job, detail=True))

    @app.get("/v1/jobs", dependencies=[Depends(require_user)])
    def list_jobs(
        state: Annotated[list[JobState] | None, Query()] = None,
        tenant: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    ) -> list[dict[str, Any]]:
        jobs = controller.store.list_jobs(states=state, tenant=tenant)
        return [job_view(j) for j in jobs[-limit:]]

    @app.get("/v1/jobs/{job_id}", dependencies=[Depends(require_user)])
    def get_job(job_id: str) -> dict[str, Any]:
        job = controller.store.get_job(job_id)
        out = job_view(job, detail=True)
        out["attempts"] = [
            {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in a.items()}
            for a in controller.store.job_attempts(job_id)
        ]
        out["events"] = [
            {"at": e.at.isoformat(), "kind": e.kind, "level": e.level, "message": e.message}
            for e in controller.store.events(job_id=job_id, limit=30)
        ]
        return out

    @app.get("/v1/jobs/{job_id}/explain", dependencies=[Depends(require_user)])
    def explain(job_id: str) -> dict[str, Any]:
        return controller.explain(job_id)

    @app.post("/v1/jobs/{job_id}/cancel", dependencies=[Depends(require_user)])
    def cancel(job_id: str) -> dict[str, Any]:
        return job_view(controller.cancel(job_id))

    @app.get("/v1/jobs/{job_id}/logs", dependencies=[Depends(require_user)], response_class=PlainTextResponse)
    def logs(job_id: str, attempt: Annotated[int | None, Query(ge=1)] = None) -> str:
        return controller.logs(job_id, attempt=attempt)

    @app.get("/v1/instances", dependencies=[Depends(require_user)])
    def instances(all: bool = False) -> list[dict[str, Any]]:
        return [instance_view(i) for i in controller.store.list_instances(live_only=not all)]

    @app.post("/v1/instances/{instance_id}/interrupt", dependencies=[Depends(require_user)])
    def interrupt(instance_id: str, body: InterruptRequest) -> dict[str, Any]:
        """Inject a reclaim notice (local provider): see ``spotfleet local interrupt``."""
        try:
            deadline = controller.interrupt(instance_id, kind=body.kind, notice=timedelta(seconds=body.notice_seconds))
        except InvalidSpec as exc:
            raise HTTPException(409, str(exc)) from None
        return {"instance": instance_id, "kind": body.kind.value, "deadline": deadline.isoformat()}

    @app.get("/v1/events", dependencies=[Depends(require_user)])
    def events(limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> list[dict[str, Any]]:
        return [
            {"at": e.at.isoformat(), "kind": e.kind, "level": e.level, "message": e.message,
             "job_id": e.job_id, "instance_id": e.instance_id}
            for e in controller.store.events(limit=limit)
        ]  # fmt: skip

    @app.get("/v1/summary", dependencies=[Depends(require_user)])
    def summary() -> dict[str, Any]:
        return summarize(controller.store, now=controller.clock.now()).to_dict()

    @app.post("/v1/agent/register")
    def register(body: RegisterRequest, token: Annotated[str, Depends(agent_token)]) -> HeartbeatResponse:
        return controller.register_agent(token, body)

    @app.post("/v1/agent/heartbeat")
    def heartbeat(body: Heartbeat, token: Annotated[str, Depends(agent_token)]) -> HeartbeatResponse:
        return controller.heartbeat(token, body)

    @app.post("/v1/agent/logs")
    def agent_logs(body: LogChunk, token: Annotated[str, Depends(agent_token)]) -> dict[str, int]:
        return {"size": controller.append_log(token, body)}

    return app
