"""Bounded input for every route, before any handler runs.

One ASGI middleware, so no route can forget it:

- a body over ``max_body`` bytes is a 413 (``Content-Length`` checked first, then
  the bytes actually streamed, so a chunked upload cannot slip past);
- a JSON body must be strict JSON: ``NaN``/``Infinity`` are refused (Python's
  ``json`` accepts them, PostgreSQL's JSON and every other client do not), and
  nesting deeper than ``MAX_DEPTH`` is refused (a 100,000-deep array raised
  ``RecursionError`` in the handler: a 500).

Refusals are ``{"error": ...}`` like every other client mistake.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spotfleet.wire import MAX_OFFSET

DEFAULT_MAX_BODY = 1024 * 1024
# job output is bytes of the job's choosing (it goes to a file); a spec's NUL is
# refused by the spec's own validation, naming the field
NUL_ALLOWED = frozenset({"/v1/agent/logs", "/v1/jobs"})
MAX_DEPTH = 32
# the largest integer a query parameter may carry: a page offset or byte offset
# past it can name nothing stored, and PostgreSQL refuses a number outside
# BIGINT ("bigint out of range": a 500 the fuzzer found in CI)
MAX_QUERY_INT = MAX_OFFSET


class BodyRefused(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _no_constants(name: str) -> Any:
    raise BodyRefused(400, f"the body is not strict JSON: {name} is not allowed (numbers must be finite)")


def depth(value: Any) -> int:
    """Nesting depth of parsed JSON, iteratively (no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, d)
            stack.extend((child, d + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def parse_strict(body: bytes, *, allow_nul: bool = False) -> Any:
    """Strict JSON within the nesting limit, or ``BodyRefused``. NUL is refused in
    every string unless ``allow_nul`` (job output shipped by agents): no store can
    keep it in text (PostgreSQL refuses it: a 500 before)."""
    try:
        value = json.loads(body, parse_constant=_no_constants)
    except RecursionError:
        raise BodyRefused(400, f"the JSON body is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except UnicodeDecodeError:
        raise BodyRefused(400, "the body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BodyRefused(400, f"the body is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if depth(value) > MAX_DEPTH:
        raise BodyRefused(400, f"the JSON body is nested too deeply (at most {MAX_DEPTH} levels)")
    if not allow_nul and b"\\u0000" in body and _has_nul(value):
        raise BodyRefused(422, "NUL characters (\\u0000) are not allowed in any field")
    return value


def _has_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class BoundedInput:
    """ASGI middleware enforcing the body limit and strict, shallow JSON."""

    def __init__(self, app: ASGIApp, *, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            declared = int(headers.get("content-length", "0") or 0)
        except ValueError:
            declared = 0
        if declared > self.max_body:
            await _refuse(send, 413, f"the request body is {declared} bytes; the limit is {self.max_body}")
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await _refuse(send, 413, f"the request body is over the limit of {self.max_body} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body and "json" in headers.get("content-type", ""):
            try:
                parse_strict(body, allow_nul=scope.get("path") in NUL_ALLOWED)
            except BodyRefused as exc:
                await _refuse(send, exc.status, str(exc))
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _refuse(send: Send, status: int, message: str) -> None:
    payload = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": payload})
