"""AWS error codes → spotfleet's typed errors.

The planner reacts to types, never to strings (see ``spotfleet.errors``), so
every botocore failure leaves the adapter as one of:

- ``InsufficientCapacity``: no capacity in that pool now; try another pool;
- ``QuotaExceeded``: an account limit; nothing in this account will launch;
- ``Throttled``: rate limited or the endpoint is briefly unavailable; back off;
- ``PermanentError``: a human must fix something (permissions, a bad
  parameter); the AWS message is kept verbatim so the operator sees it.

botocore's own retry mode (standard/adaptive) has already retried throttling
and 5xx responses by the time an error reaches this module, so a ``Throttled``
here means "the retries ran out": back off for a whole reconcile tick rather
than retrying in a tight loop.
"""

from __future__ import annotations

import enum
from typing import Any

from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    ConnectionError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError  # type: ignore[import-untyped]

from spotfleet.errors import MissingCredentials, PermanentError, ProviderError, QuotaExceeded, Throttled

# Codes AWS answers when credentials are refused (not merely lacking a permission).
CREDENTIAL_CODES = frozenset({"AuthFailure", "InvalidClientTokenId", "UnrecognizedClientException",
                              "SignatureDoesNotMatch", "ExpiredToken", "RequestExpired"})  # fmt: skip

__all__ = ["AWS_ERRORS", "BotoCoreError", "ClientError", "ErrorClass", "classify", "translate"]


# What a boto3 call can raise that is the cloud's doing (catch these, nothing broader).
# ResponseParserError: an endpoint answered something that is not AWS's protocol.
AWS_ERRORS: tuple[type[Exception], ...] = (ClientError, BotoCoreError, ResponseParserError)


class ErrorClass(enum.StrEnum):
    CAPACITY = "capacity"
    QUOTA = "quota"
    THROTTLED = "throttled"
    PERMANENT = "permanent"


CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "UnfulfillableCapacity",
    }
)
QUOTA_CODES = frozenset(
    {
        "VcpuLimitExceeded",
        "MaxFleetCountExceeded",
        "InstanceLimitExceeded",
        "MaxSpotFleetRequestCountExceeded",
    }
)
THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "ServiceUnavailable",
        "Unavailable",
        "InternalError",
        "InternalFailure",
        "ServerInternal",
    }
)

# How long to back off when botocore's retries ran out (seconds).
THROTTLE_BACKOFF_S = 30.0


def classify(code: str) -> ErrorClass:
    """Which kind of failure an AWS error code is.

    Unknown codes are permanent: retrying an error nobody has seen before in a
    loop is how retry storms start; a human looks at it instead.
    """
    if code in CAPACITY_CODES:
        return ErrorClass.CAPACITY
    if code in QUOTA_CODES:
        return ErrorClass.QUOTA
    if code in THROTTLE_CODES:
        return ErrorClass.THROTTLED
    return ErrorClass.PERMANENT


def error_code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", "Unknown"))


def error_message(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Message", ""))


def translate(err: BaseException, *, operation: str) -> ProviderError:
    """The typed error for a botocore failure during ``operation``.

    Capacity errors raised for a whole call (not per fleet override) cannot name
    the offerings here; the launch path handles those itself and never calls
    this with a capacity code. Elsewhere a capacity code is permanent-looking
    but transient, so it maps to ``Throttled``.
    """
    if isinstance(err, ClientError):
        code = error_code(err)
        message = " ".join(error_message(err).split())[:500]  # one line, even from an HTML error page
        text = f"{operation}: {code}: {message}"
        kind = classify(code)
        if code in CREDENTIAL_CODES:
            return MissingCredentials(f"{operation}: AWS refused the credentials ({code}): {message}")
        if kind is ErrorClass.QUOTA:
            return QuotaExceeded(text)
        if kind in (ErrorClass.THROTTLED, ErrorClass.CAPACITY):
            return Throttled(THROTTLE_BACKOFF_S, text)
        return PermanentError(text)
    if isinstance(err, NoCredentialsError | PartialCredentialsError):
        return MissingCredentials(
            f"{operation}: no AWS credentials found: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
            "or run on an instance with a role (docs/aws.md)"
        )
    if isinstance(err, EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError | ConnectionError):
        return Throttled(THROTTLE_BACKOFF_S, f"{operation}: endpoint unreachable: {err}")
    if isinstance(err, BotoCoreError | ResponseParserError):
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        return PermanentError(f"{operation}: {first_line[:300]}")
    return PermanentError(f"{operation}: {type(err).__name__}: {err}")


def response_error(parsed: dict[str, Any]) -> tuple[str, str]:
    """(code, message) of one entry of a CreateFleet response's ``Errors``."""
    return str(parsed.get("ErrorCode", "Unknown")), str(parsed.get("ErrorMessage", ""))
