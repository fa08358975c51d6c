"""Compute Engine failures → spotfleet's typed errors.

GCE reports a failure in one of two places, and both are handled:

1. the HTTP call itself fails (``google.api_core.exceptions.GoogleAPICallError``
   with ``errors[0].reason``), e.g. 503 ``ZONE_RESOURCE_POOL_EXHAUSTED``, 429
   ``rateLimitExceeded``, 404 ``notFound``;
2. the call is accepted and its zone ``Operation`` finishes DONE carrying
   ``error.errors[].code`` (how a stockout or a regional GPU quota usually
   surfaces for ``instances.insert``).

Mapping (reasons compared case- and underscore-insensitively):

==============================================  ==========================================
``ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]``  ``InsufficientCapacity(offering)``
``QUOTA_EXCEEDED`` / ``quotaExceeded``           ``QuotaExceeded``
``RESOURCE_NOT_FOUND`` / ``notFound`` / 404      ``InstanceNotFound`` (when an instance was named)
HTTP 429, ``rateLimitExceeded``                  ``Throttled(Retry-After or default)``
other HTTP 5xx                                   ``Throttled`` (transient; retry next tick)
anything else                                    ``PermanentError``
==============================================  ==========================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from spotfleet.errors import (
    InstanceNotFound,
    InsufficientCapacity,
    PermanentError,
    ProviderError,
    QuotaExceeded,
    QuotaScope,
    Throttled,
)
from spotfleet.model.offering import Offering

_STOCKOUT = ("zoneresourcepoolexhausted", "zoneresourcepoolexhaustedwithdetails")
_QUOTA = ("quotaexceeded",)
_NOT_FOUND = ("resourcenotfound", "notfound")
_RATE = ("ratelimitexceeded", "userratelimitexceeded")


def _norm(reason: str) -> str:
    return reason.replace("_", "").replace("-", "").lower()


def _classify(
    reasons: Iterable[str],
    *,
    status: int | None,
    message: str,
    offering: Offering | None,
    instance_id: str | None,
    retry_after: float,
) -> ProviderError:
    normalized = [_norm(r) for r in reasons if r]
    if any(r in _STOCKOUT for r in normalized):
        if offering is None:
            return PermanentError(f"unexpected stockout outside a launch: {message}")
        return InsufficientCapacity([offering], f"{offering.key}: {message}")
    if any(r in _QUOTA for r in normalized):
        scope = QuotaScope.GLOBAL if "ALL_REGIONS" in message.upper() else QuotaScope.REGION
        return QuotaExceeded(message, scope=scope, region=offering.region if offering else None)
    if status == 429 or any(r in _RATE for r in normalized):
        return Throttled(retry_after, f"rate limited by Compute Engine: {message}")
    if status == 404 or any(r in _NOT_FOUND for r in normalized):
        if instance_id is not None:
            return InstanceNotFound(instance_id)
        return PermanentError(f"not found: {message}")
    if status is not None and status >= 500:
        return Throttled(retry_after, f"Compute Engine unavailable ({status}): {message}")
    return PermanentError(message)


def _retry_after(exc: gexc.GoogleAPICallError, default: float) -> float:
    response: Any = exc.response
    headers: Mapping[str, str] = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After")
    try:
        return float(value) if value is not None else default
    except ValueError:
        return default


def from_api_error(
    exc: gexc.GoogleAPICallError,
    *,
    offering: Offering | None = None,
    instance_id: str | None = None,
    default_retry_after: float = 5.0,
) -> ProviderError:
    """Translate a failed HTTP call."""
    reasons = [str(e.get("reason", "")) for e in exc.errors if isinstance(e, dict)]
    if exc.reason:
        reasons.append(exc.reason)
    status = int(exc.code) if isinstance(exc.code, int) else None
    return _classify(
        reasons,
        status=status,
        message=exc.message,
        offering=offering,
        instance_id=instance_id,
        retry_after=_retry_after(exc, default_retry_after),
    )


def from_operation(
    operation: compute_v1.Operation,
    *,
    offering: Offering | None = None,
    instance_id: str | None = None,
    default_retry_after: float = 5.0,
) -> ProviderError | None:
    """The error a finished operation carries, typed; ``None`` if it succeeded."""
    errors = list(operation.error.errors) if "error" in operation else []
    if not errors:
        return None
    message = "; ".join(f"{e.code}: {e.message}" for e in errors)
    status = operation.http_error_status_code if "http_error_status_code" in operation else None
    return _classify(
        [e.code for e in errors],
        status=status,
        message=message,
        offering=offering,
        instance_id=instance_id,
        retry_after=default_retry_after,
    )
