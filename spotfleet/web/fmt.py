"""Template filters: money, durations, times — one way to write each everywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def money(value: float | None) -> str:
    """Dollars as ``spotfleet cost report`` prints them: cents from $1 up, 4 decimals below."""
    if value is None:
        return "–"
    return f"${value:,.2f}" if abs(value) >= 1 or value == 0 else f"${value:,.4f}"


def rate(value: float | None) -> str:
    return "–" if value is None else f"${value:,.3f}/h"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}%"


def duration(delta: timedelta | float | None) -> str:
    """``3d 4h``, ``2h 05m``, ``4m 10s``, ``12s``: two units at most."""
    if delta is None:
        return "–"
    seconds = int(delta.total_seconds() if isinstance(delta, timedelta) else delta)
    seconds = max(seconds, 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def when(t: datetime | str | None) -> str:
    """UTC, to the second: ``2026-12-02 18:28:26Z``."""
    if t is None:
        return "–"
    if isinstance(t, str):
        t = datetime.fromisoformat(t.replace("Z", "+00:00"))
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def epoch_ms(t: datetime | None) -> int | None:
    """What the charts' time axes take."""
    return None if t is None else int(t.timestamp() * 1000)


FILTERS = {"money": money, "rate": rate, "pct": pct, "duration": duration, "when": when}
