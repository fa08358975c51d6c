"""One output convention for every read verb: ``-o table|wide|json|yaml``.

- ``table`` (default): for people. On a terminal a rich table; piped or
  redirected, plain aligned columns with no colour, no wrapping and no
  truncation, so ``spotfleet jobs | awk '{print $1}'`` gets whole ids.
- ``wide``: the table with the extra columns (provider ids, regions, full
  messages).
- ``json``: for programs. Lists are a JSON array of objects, single things an
  object; the keys are the HTTP API's (docs/cli.md lists them) and only ever
  grow. Under ``--watch`` each refresh is one compact JSON document per line.
- ``yaml``: the same data as ``json``, as YAML (``---`` between refreshes).

Design choice: commands build their data first (the API's dicts), then hand it
here with a table description; they never print tables themselves, so the four
formats cannot drift apart.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import typer

Justify = Literal["left", "right"]


class Format(enum.StrEnum):
    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


OUTPUT_HELP = "output format: table, wide (more columns), json or yaml (stable keys, see docs/cli.md)"


def output_option(default: Format = Format.table) -> Any:
    """``-o/--output`` (``--format`` is accepted too)."""
    return typer.Option(default, "--output", "-o", "--format", help=OUTPUT_HELP, case_sensitive=False)


def json_alias() -> Any:
    """The older ``--json`` flag, kept hidden so scripts keep working."""
    return typer.Option(False, "--json", hidden=True, help="same as -o json")


def resolve(fmt: Format, json_flag: bool = False) -> Format:
    return Format.json if json_flag else fmt


def is_tty() -> bool:
    return sys.stdout.isatty()


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: a header and how to get its text from a row."""

    header: str
    get: Callable[[Any], Any]
    wide_only: bool = False
    justify: Justify = "left"
    identifier: bool = False  # an id: never wrapped or cut, even on a narrow terminal
    style: Callable[[Any], str] | None = None  # rich style for a cell (terminal only)


@dataclass(slots=True)
class TableView:
    """Rows plus columns: rendered as rich (terminal) or plain text (pipes)."""

    columns: Sequence[Column]
    rows: Sequence[Any]
    title: str | None = None
    notes: list[str] = field(default_factory=list)

    def visible(self, wide: bool) -> list[Column]:
        return [c for c in self.columns if wide or not c.wide_only]

    def cells(self, wide: bool) -> list[list[str]]:
        return [[cell(c.get(row)) for c in self.visible(wide)] for row in self.rows]

    def plain(self, *, wide: bool) -> str:
        """Aligned columns, whole values, no styling (what a pipe gets)."""
        cols = self.visible(wide)
        body = self.cells(wide)
        headers = [c.header for c in cols]
        widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]
        lines = []
        for values in [headers, *body] if any(headers) else body:
            parts = [
                v.rjust(w) if c.justify == "right" else v.ljust(w) for v, w, c in zip(values, widths, cols, strict=True)
            ]
            lines.append("  ".join(parts).rstrip())
        lines.extend(self.notes)
        return "\n".join(lines) + "\n"

    def rich(self, *, wide: bool) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        cols = self.visible(wide)
        table = Table(title=self.title, title_justify="left", show_header=any(c.header for c in cols))
        for c in cols:
            table.add_column(c.header, justify=c.justify, no_wrap=c.identifier, overflow="fold")
        for row in self.rows:
            texts = []
            for c in cols:
                style = c.style(row) if c.style else ""
                texts.append(Text(cell(c.get(row)), style=style or ""))
            table.add_row(*texts)
        if not self.notes:
            return table
        return Group(table, *(Text(n, style="dim") for n in self.notes))


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


View = Callable[[Any, bool], Any]


def render(data: Any, fmt: Format, view: View | None = None, *, watch: bool = False) -> str | Any:
    """Text for json/yaml; for table/wide, a plain string (pipes) or a rich
    renderable (terminal). ``view(data, wide)`` builds a ``TableView``, a string
    or any rich renderable."""
    if fmt is Format.json:
        return (
            json.dumps(data, default=str, separators=(",", ":")) if watch else json.dumps(data, indent=2, default=str)
        )
    if fmt is Format.yaml:
        import yaml

        return ("---\n" if watch else "") + yaml.safe_dump(_plain_data(data), sort_keys=False, allow_unicode=True)
    if view is None:
        return json.dumps(data, indent=2, default=str)
    built = view(data, fmt is Format.wide)
    if isinstance(built, TableView):
        return built.rich(wide=fmt is Format.wide) if is_tty() else built.plain(wide=fmt is Format.wide)
    return built


def emit(data: Any, fmt: Format, view: View | None = None) -> None:
    """Print ``data`` in ``fmt`` (see ``render``)."""
    out = render(data, fmt, view)
    if isinstance(out, str):
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
        sys.stdout.flush()
    else:
        console().print(out)


def console() -> Any:
    """A terminal gets its own width; a pipe gets wide lines rather than wrapped ones."""
    from rich.console import Console

    return Console() if is_tty() else Console(width=200)


def _plain_data(data: Any) -> Any:
    """JSON round trip: YAML gets exactly the types JSON gets (no Python tags)."""
    return json.loads(json.dumps(data, default=str))


OUTPUT = output_option()
JSON_ALIAS = json_alias()
