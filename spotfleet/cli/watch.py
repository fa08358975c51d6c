"""``--watch``: redraw a read verb every few seconds until Ctrl-C.

On a terminal with ``-o table|wide`` the view is redrawn in place (rich Live).
Piped, or with ``-o json|yaml``, each refresh is appended: a table under a
timestamp line, one compact JSON document per line (JSON Lines), or one YAML
document per refresh (``---``). Ctrl-C ends a watch with exit code 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from spotfleet.cli.output import Format, TableView, View, console, is_tty, render

WATCH_HELP = "refresh every --interval seconds until Ctrl-C"
INTERVAL_HELP = "seconds between refreshes with --watch"


def watch(fetch: Callable[[], Any], fmt: Format, view: View | None, *, interval: float) -> None:
    try:
        if fmt in (Format.table, Format.wide) and is_tty():
            _live(fetch, fmt, view, interval=interval)
        else:
            _append(fetch, fmt, view, interval=interval)
    except KeyboardInterrupt:
        pass


def _live(fetch: Callable[[], Any], fmt: Format, view: View | None, *, interval: float) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    def frame() -> Any:
        built = render(fetch(), fmt, view)
        stamp = Text(f"every {interval:g}s — {datetime.now(UTC):%H:%M:%S} UTC — Ctrl-C to stop", style="dim")
        return Group(stamp, built)

    with Live(frame(), console=console(), refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(interval)
            live.update(frame())


def _append(fetch: Callable[[], Any], fmt: Format, view: View | None, *, interval: float) -> None:
    while True:
        data = fetch()
        if fmt in (Format.table, Format.wide):
            built = view(data, fmt is Format.wide) if view is not None else None
            text = (
                built.plain(wide=fmt is Format.wide) if isinstance(built, TableView) else str(render(data, fmt, view))
            )
            sys.stdout.write(f"# {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}\n{text}\n")
        else:
            out = render(data, fmt, view, watch=True)
            sys.stdout.write(out if isinstance(out, str) and out.endswith("\n") else f"{out}\n")
        sys.stdout.flush()
        time.sleep(interval)
