"""Entry point of the ``spotfleet`` command.

Each topic lives in its own module under ``spotfleet/cli/`` and registers its
commands here; heavy imports happen inside commands so ``spotfleet --help`` and
the node agent start fast.
"""

from __future__ import annotations

import typer

import spotfleet

app = typer.Typer(
    name="spotfleet",
    help="A cost-aware autoscaler for GPU spot fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(spotfleet.__version__)
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """A cost-aware autoscaler for GPU spot fleets."""


def _register() -> None:
    from spotfleet.cli import config_cmd, cost, demo, explain, jobs, local, offerings, server, simulate

    jobs.register(app)
    server.register(app)
    demo.register(app)
    local.register(app)
    explain.register(app)
    offerings.register(app)
    config_cmd.register(app)
    simulate.register(app)
    app.add_typer(cost.app, name="cost")


_register()
