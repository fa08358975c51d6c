"""``spotfleet schema NAME``: JSON Schema of a spec or config, or the reference."""

from __future__ import annotations

import json

import typer

from spotfleet.cli.client import fail


def schema(
    name: str = typer.Argument(
        ..., help="job, config, aws, gcp, local, agent-config — or reference (docs/reference.md)"
    ),
) -> None:
    """Print the JSON Schema of a job spec or a config (from the pydantic models), or the Markdown reference."""
    from spotfleet import reference

    if name == "reference":
        typer.echo(reference.markdown(), nl=False)
        return
    known = reference.models()
    if name not in known:
        import difflib

        guess = difflib.get_close_matches(name, [*known, "reference"], n=1)
        hint = f"did you mean {guess[0]!r}? " if guess else ""
        fail(f"no schema {name!r}; {hint}choose from {', '.join([*known, 'reference'])}")
    typer.echo(json.dumps(reference.json_schema(name), indent=2))


def register(app: typer.Typer) -> None:
    app.command()(schema)
