"""``spotfleet token create|list|revoke``: scoped API tokens (``spotfleet.api.auth``).

Design choice: like ``spotfleet cost``, these read and write the store directly
(``--db URL`` or ``--config FILE``): the first admin token has to come from
somewhere that needs no token, and whoever can open the database already holds
everything a token could grant. ``/v1/tokens`` does the same over HTTP for an
admin token.

- ``spotfleet token create admin|viewer|tenant:NAME [--scope read --scope submit] [--name TEXT]``
  prints the token once (it is stored hashed and cannot be shown again);
- ``spotfleet token list [--all] [-o table|json|yaml]``;
- ``spotfleet token revoke ID``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from spotfleet.cli import output
from spotfleet.cli.cost import CONFIG, DB, open_store
from spotfleet.cli.exitcodes import ExitCode

OUTPUT = output.output_option()
app = typer.Typer(help="Scoped API tokens: admin, viewer, tenant:NAME (read/submit).", no_args_is_help=True)


@app.command("create")
def create(
    kind: str = typer.Argument(..., help="admin, viewer or tenant:NAME"),
    scope: list[str] | None = typer.Option(None, "--scope", help="read and/or submit (tenant tokens; default both)"),
    name: str = typer.Option("", "--name", help="a note shown by `token list`"),
    config: Path | None = CONFIG,
    db: str | None = DB,
    fmt: output.Format = OUTPUT,
) -> None:
    """Mint a token and print it once (only its SHA-256 is stored)."""
    from spotfleet.api.auth import create_token
    from spotfleet.clock import SystemClock

    store = open_store(config, db)
    token, record = create_token(store, kind=kind, name=name, scopes=scope or None, now=SystemClock().now())
    if fmt in (output.Format.json, output.Format.yaml):
        output.emit({**record.to_dict(), "token": token}, fmt)
        return
    sys.stdout.write(token + "\n")
    sys.stderr.write(f"token {record.id} ({record.kind}{':' + record.tenant if record.tenant else ''}, "
                     f"{','.join(record.scopes)}): shown once, send it as `Authorization: Bearer ...` "
                     "or SPOTFLEET_API_TOKEN\n")  # fmt: skip


def _view(rows: list[dict[str, Any]], _wide: bool) -> output.TableView:
    def col(header: str, key: str, **kw: Any) -> output.Column:
        return output.Column(header, lambda r: r[key], **kw)

    return output.TableView(
        columns=[col("ID", "id", identifier=True), col("KIND", "kind"), col("TENANT", "tenant"),
                 output.Column("SCOPES", lambda r: ",".join(r["scopes"])), col("NAME", "name"),
                 col("CREATED", "created_at"), col("REVOKED", "revoked_at", wide_only=True)],
        rows=rows,
    )  # fmt: skip


@app.command("list")
def list_cmd(
    all_: bool = typer.Option(False, "--all", help="include revoked tokens"),
    config: Path | None = CONFIG,
    db: str | None = DB,
    fmt: output.Format = OUTPUT,
) -> None:
    """Tokens by id, kind, tenant and scopes (never the tokens themselves)."""
    store = open_store(config, db)
    output.emit([t.to_dict() for t in store.tokens(include_revoked=all_)], fmt, _view)


@app.command("revoke")
def revoke(
    token_id: str = typer.Argument(..., help="the ID `token list` shows"),
    config: Path | None = CONFIG,
    db: str | None = DB,
) -> None:
    """Revoke a token at once (its next request is a 401)."""
    from spotfleet.cli.client import fail
    from spotfleet.clock import SystemClock

    store = open_store(config, db)
    if not store.revoke_token(token_id, at=SystemClock().now()):
        fail(f"no live token {token_id!r} (see `spotfleet token list`)", code=ExitCode.NOT_FOUND)
    sys.stdout.write(f"revoked {token_id}\n")
