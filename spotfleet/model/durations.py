"""Human durations: ``90``, ``"90s"``, ``"30m"``, ``"2h30m"``, ``"1d"``, ``"PT2H"``.

Job specs and config are written by people; ``2h`` reads better than ``7200``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")


def parse_duration(value: Any) -> timedelta:
    """Parse a duration; raise ``ValueError`` with the accepted forms."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 90, '90s', '30m' or '2h30m'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return timedelta(seconds=float(value))
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.startswith("pt") or text.startswith("p"):
            from pydantic import TypeAdapter

            return TypeAdapter(timedelta).validate_python(value)
        try:
            seconds = float(text)
        except ValueError:
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


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


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
