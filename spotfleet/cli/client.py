"""A small HTTP client for the CLI's user commands (httpx).

Every failure becomes one ``error:`` line and the exit code of its kind
(``spotfleet.cli.exitcodes``): unreachable or 5xx → 1, 4xx → 2, 404 → 3,
401/403 → 4.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

import httpx
import typer

from spotfleet.cli.exitcodes import ExitCode, for_http_status

DEFAULT_API = "http://127.0.0.1:8478"


class ApiClient:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.url = (url or os.environ.get("SPOTFLEET_API") or DEFAULT_API).rstrip("/")
        token = token or os.environ.get("SPOTFLEET_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.ConnectError:
            fail(
                f"cannot reach the controller at {self.url}: is `spotfleet up` running? (set --api or SPOTFLEET_API)",
                code=ExitCode.UNREACHABLE,
            )
        except httpx.HTTPError as exc:
            fail(f"request to {self.url} failed: {exc}", code=ExitCode.UNREACHABLE)
        if resp.status_code >= 400:
            fail(error_message(resp), code=for_http_status(resp.status_code))
        return resp

    def try_get(self, path: str, **kwargs: Any) -> Any | None:
        """GET that answers ``None`` for a 404 (an endpoint this controller lacks)."""
        try:
            resp = self.http.get(path, **kwargs)
        except httpx.HTTPError:
            return None
        if resp.status_code >= 400:
            return None
        try:
            return resp.json()
        except ValueError:
            return None

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs).json()


def error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip() or f"HTTP {resp.status_code}"
    if isinstance(body, dict):
        errors = body.get("errors")
        if isinstance(errors, list) and errors:
            return "\n".join(str(e) for e in errors)
        return str(body.get("error") or body.get("detail") or body)
    return str(body)


def fail(message: str, *, code: int = ExitCode.BAD_INPUT) -> NoReturn:
    """One ``error: ...`` line per problem on stderr, then exit with ``code``."""
    for line in message.splitlines() or [""]:
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(int(code))
