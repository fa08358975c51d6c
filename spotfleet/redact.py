"""Secrets never printed: one place that masks them in text.

``redact`` masks the password of every URL in a string
(``postgresql://u:pw@h/db`` → ``postgresql://u:***@h/db``) and any bearer token
(``Bearer abc…`` → ``Bearer ***``); ``RedactingFilter`` applies it to every log
record, so a banner, a log line, an error or an event written through logging
cannot carry the database password.
"""

from __future__ import annotations

import logging
import re

_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]+)(?P<at>@)")
_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"']+")
MASK = "***"


def redact(text: str) -> str:
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}{m['at']}", text)
    return _BEARER.sub(lambda m: f"{m.group(1)}{MASK}", text)


def redact_url(url: str) -> str:
    return redact(url)


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's final message (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def install(logger: logging.Logger | None = None) -> None:
    """Add the filter to every handler of ``logger`` (default: the root logger)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
