"""``spotfleet local ...``: controls for the local provider's pretend cloud."""

from __future__ import annotations

import typer

from spotfleet.cli.client import ApiClient
from spotfleet.cli.jobs import API

local_app = typer.Typer(help="Controls for the local provider (real processes playing a cloud).", no_args_is_help=True)

KINDS = {"spot": "spot_interruption", "rebalance": "rebalance", "maintenance": "maintenance"}


@local_app.command()
def interrupt(
    instance: str = typer.Argument(..., help="instance id (as `spotfleet instances` shows it)"),
    kind: str = typer.Option("spot", "--kind", help="spot | rebalance | maintenance"),
    notice: float = typer.Option(120.0, "--notice", help="seconds of warning before the reclaim"),
    api: str | None = API,
) -> None:
    """Announce a reclaim: the instance's metadata service reports it, and a spot
    instance really dies when the notice runs out."""
    if kind not in KINDS:
        typer.echo(f"error: --kind must be one of {', '.join(KINDS)} (got {kind!r})", err=True)
        raise typer.Exit(2)
    answer = ApiClient(api).post(f"/v1/instances/{instance}/interrupt",
                                 json={"kind": KINDS[kind], "notice_seconds": notice})  # fmt: skip
    typer.echo(f"{kind} notice on {instance}; reclaim at {answer['deadline']}")


def register(app: typer.Typer) -> None:
    app.add_typer(local_app, name="local")
