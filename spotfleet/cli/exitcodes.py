"""Exit codes of every ``spotfleet`` command (docs/cli.md lists them).

Scripts can tell "try again later" (1) from "fix your input" (2) from "that id
does not exist" (3) without parsing messages. Every failure also prints one
line, ``error: ...``, on stderr.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    UNREACHABLE = 1  # the controller, the database or a cloud API could not be reached (or failed: HTTP 5xx)
    BAD_INPUT = 2  # an invalid flag, spec, config or request (HTTP 400/409/422); usage errors too
    NOT_FOUND = 3  # no such job or instance (HTTP 404)
    UNAUTHORIZED = 4  # a missing or wrong API token, or no cloud credentials (HTTP 401/403)
    ENVIRONMENT = 5  # this machine lacks something: a port in use, an optional extra not installed
    INCOMPLETE = 6  # a wait ran out before the work was done (`down`, `demo`), or the user declined
    INTERRUPTED = 130  # Ctrl-C


def for_http_status(status: int) -> ExitCode:
    if status in (401, 403):
        return ExitCode.UNAUTHORIZED
    if status == 404:
        return ExitCode.NOT_FOUND
    if 400 <= status < 500:
        return ExitCode.BAD_INPUT
    return ExitCode.UNREACHABLE
