"""A small HTTP client for the CLI's user commands (httpx)."""

from __future__ import annotations

import os
from typing import Any

import httpx
import typer

DEFAULT_API = "http://127.0.0.1:8478"


class ApiClient:
    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.url = (url or os.environ.get("SPOTFLEET_API") or DEFAULT_API).rstrip("/")
        token = token or os.environ.get("SPOTFLEET_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.ConnectError:
            fail(
                f"cannot reach the controller at {self.url}: is `spotfleet up` running? (set --api or SPOTFLEET_API)",
                code=1,
            )
        except httpx.HTTPError as exc:
            fail(f"request to {self.url} failed: {exc}", code=1)
        if resp.status_code >= 400:
            try:
                message = resp.json().get("error") or resp.json().get("detail") or resp.text
            except ValueError:
                message = resp.text
            fail(str(message), code=2 if resp.status_code < 500 else 1)
        return resp

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs).json()


def fail(message: str, *, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)
