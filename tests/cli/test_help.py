"""``--help`` on every command and subcommand, found by walking the click tree,
so a command added later is covered without touching this file."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from spotfleet.cli.main import app


def command_paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Typer ships its own click (``typer._click``): groups are found by their
    ``commands`` mapping rather than by class."""
    paths = [prefix]
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in sorted(subcommands.items()):
            paths.extend(command_paths(sub, (*prefix, name)))
    return paths


ROOT = typer.main.get_command(app)
PATHS = command_paths(ROOT)


def test_the_walk_finds_nested_commands() -> None:
    assert ("cost", "report") in PATHS and ("local", "interrupt") in PATHS and ("submit",) in PATHS
    assert len(PATHS) > 15, PATHS


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "spotfleet")
def test_help_renders(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], catch_exceptions=False, env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    target = ROOT
    for name in path:
        target = target.commands[name]  # type: ignore[attr-defined]
    first_line = (target.help or target.short_help or "").strip().splitlines()
    assert first_line, f"{' '.join(path)} has no help text"
    assert first_line[0].split()[0] in result.output
