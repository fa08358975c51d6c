"""Human durations: ``90``, ``"90s"``, ``"30m"``, ``"2h30m"``, ``"1d"``, ``"PT2H"``.

Job specs and config are written by people; ``2h`` reads better than ``7200``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import cache
from typing import Annotated, Any

from pydantic import BeforeValidator, TypeAdapter, ValidationError, WithJsonSchema

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")


MAX_DURATION = timedelta(days=365)


@cache
def _iso_adapter() -> TypeAdapter[timedelta]:
    """pydantic's ISO 8601 reader, built once: building a ``TypeAdapter`` costs about
    0.2 ms, and every stored spec's durations come back as ``PT...`` strings, so a
    fresh one per value was half of a reconcile step's time on a 1,000-job backlog."""
    return TypeAdapter(timedelta)


def parse_duration(value: Any) -> timedelta:
    """Parse a duration (at most ``MAX_DURATION``); raise ``ValueError`` with the accepted forms."""
    try:
        delta = _parse(value)
    except OverflowError:  # timedelta(seconds=1e20), "inf": the number is out of range
        raise ValueError(f"a duration is at most {MAX_DURATION.days} days") from None
    if delta > MAX_DURATION:
        raise ValueError(f"a duration is at most {MAX_DURATION.days} days (got {value!r})")
    return delta


def _parse(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValueError("a duration cannot be negative")
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 90, '90s', '30m' or '2h30m'")
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("a duration must be a finite number of seconds")
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return timedelta(seconds=float(value))
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.startswith("pt") or text.startswith("p"):
            try:
                return _iso_adapter().validate_python(value)
            except ValidationError:
                raise ValueError(f"cannot read {value!r} as an ISO 8601 duration such as PT2H") from None
        try:
            seconds = float(text)
            if seconds != seconds or seconds in (float("inf"), float("-inf")):
                raise ValueError(f"cannot read {value!r} as a duration; give a finite number of seconds")
        except ValueError as exc:
            if "finite" in str(exc):
                raise
            pos, seconds = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNITS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise ValueError(
                    f"cannot read {value!r} as a duration; write e.g. 90, '90s', '30m', '2h30m' or '1d'"
                ) from None
        if seconds < 0:
            raise ValueError("a duration cannot be negative")
        return timedelta(seconds=seconds)
    raise ValueError("expected a duration such as 90, '90s', '30m' or '2h30m'")


DURATION_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "examples": ["90s", "30m", "2h30m", "1d", "PT2H"]},
        {"type": "number", "minimum": 0, "description": "seconds"},
    ],
    "description": "a duration: 90 (seconds), '90s', '30m', '2h30m', '1d' or ISO 8601 ('PT2H')",
}
Duration = Annotated[timedelta, BeforeValidator(parse_duration), WithJsonSchema(DURATION_SCHEMA)]


def format_duration(delta: timedelta | float) -> str:
    """Short human form: ``1h02m``, ``3m05s``, ``12s``."""
    seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.0f}s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{sign}{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{sign}{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"
