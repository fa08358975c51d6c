"""Logging in to the dashboard: the same bearer tokens as the API, kept in a cookie.

Design choice: the login form posts the token once; the controller checks it
with the same ``PrincipalResolver`` the API uses and, if it lets the token in,
stores it in an ``HttpOnly``, ``SameSite=Strict`` cookie. Every later page,
htmx fragment and download carries it without any script touching the token
(a script injected into a page cannot read it). The cookie lives until the
browser closes, or until "log out" clears it; revoking the token (issue 16's
scoped tokens) takes effect on the next request, since nothing but the token
is stored.

State-changing requests (cancel) also need the ``HX-Request`` header, which
htmx sets and a cross-site form cannot: with ``SameSite=Strict`` that is the
CSRF defence, and no CSRF token has to round-trip through the pages.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import HTTPException, Request

from spotfleet.api.principal import Principal, PrincipalResolver

COOKIE = "spotfleet_token"


class LoginRequired(Exception):
    """No principal for this request: pages redirect to the login form."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


def request_token(request: Request) -> str | None:
    """The bearer header wins (scripts, curl); else the login cookie."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header.split(" ", 1)[1].strip() or None
    return request.cookies.get(COOKIE) or None


def principal_of(request: Request, resolve: PrincipalResolver) -> Principal:
    principal = resolve(request_token(request))
    if principal is None:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(path)
    return principal


def require_htmx(request: Request) -> None:
    """Refuse a state change that did not come from the dashboard's own scripts."""
    if request.headers.get("hx-request") != "true":
        raise HTTPException(403, "send this from the dashboard (HX-Request header missing)")


def safe_next(path: str | None) -> str:
    """Only a path on this server, never ``//elsewhere`` or ``https://...``."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def login_url(next_path: str) -> str:
    return "/login" + ("" if next_path in ("", "/") else f"?next={quote(next_path, safe='/')}")
