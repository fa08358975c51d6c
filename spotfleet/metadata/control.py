"""Steer a running metadata emulator from another process.

``spotfleet local interrupt`` and the API call these against the control
endpoint of the fake instance's emulator (see ``spotfleet.metadata.base``).
Errors come back typed: ``UnsupportedNotice`` when the emulator refuses the
notice (400), ``httpx.HTTPError`` when it cannot be reached.
"""

from __future__ import annotations

from typing import Any

import httpx

from spotfleet.metadata.base import CONTROL_PREFIX, UnsupportedNotice


def _post(base_url: str, action: str, payload: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    response = httpx.post(f"{base_url.rstrip('/')}{CONTROL_PREFIX}{action}", json=payload, timeout=timeout)
    if response.status_code == 400:
        raise UnsupportedNotice(str(response.json().get("error", "refused")))
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def inject_notice(
    base_url: str,
    kind: str = "spot",
    *,
    notice_seconds: float | None = None,
    action: str | None = None,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """Make the emulator report a notice; returns its state, with ``deadline``."""
    payload: dict[str, Any] = {"kind": kind}
    if notice_seconds is not None:
        payload["notice_seconds"] = notice_seconds
    if action is not None:
        payload["action"] = action
    return _post(base_url, "notice", payload, timeout=timeout)


def clear_notice(base_url: str, kind: str | None = None, *, timeout: float = 5.0) -> dict[str, Any]:
    """Withdraw one notice (or all)."""
    return _post(base_url, "clear", {} if kind is None else {"kind": kind}, timeout=timeout)


def inject_faults(
    base_url: str,
    *,
    fail_next: int = 0,
    status: int = 503,
    hang_next: int = 0,
    hang_seconds: float = 5.0,
    expire_tokens: bool = False,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """Fail or hang the next metadata requests, or expire the session tokens."""
    payload = {
        "fail_next": fail_next,
        "status": status,
        "hang_next": hang_next,
        "hang_seconds": hang_seconds,
        "expire_tokens": expire_tokens,
    }
    return _post(base_url, "faults", payload, timeout=timeout)


def state(base_url: str, *, timeout: float = 5.0) -> dict[str, Any]:
    response = httpx.get(f"{base_url.rstrip('/')}{CONTROL_PREFIX}state", timeout=timeout)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result
