"""Entry point of the ``spotfleet`` command.

Each topic lives in its own module under ``spotfleet/cli/`` and registers its
commands here; heavy imports happen inside commands so ``spotfleet --help`` and
the node agent start fast.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

import spotfleet
from spotfleet.cli.exitcodes import ExitCode
from spotfleet.errors import (
    ControllerLocked,
    InvalidSpec,
    MissingCredentials,
    MissingExtra,
    NotFound,
    PortInUse,
    StoreUnavailable,
)


class SpotfleetGroup(TyperGroup):
    """Turns the errors a user can fix into one ``error:`` line per problem and
    the documented exit code (docs/cli.md), instead of a traceback, whichever
    command raised them."""

    def invoke(self, ctx: Any) -> Any:
        from spotfleet.cli.client import fail

        try:
            return super().invoke(ctx)
        except (InvalidSpec, ControllerLocked) as exc:
            fail(str(exc), code=ExitCode.BAD_INPUT)
        except NotFound as exc:
            fail(str(exc), code=ExitCode.NOT_FOUND)
        except MissingCredentials as exc:
            fail(str(exc), code=ExitCode.UNAUTHORIZED)
        except (MissingExtra, PortInUse) as exc:
            fail(str(exc), code=ExitCode.ENVIRONMENT)
        except StoreUnavailable as exc:
            fail(str(exc), code=ExitCode.UNREACHABLE)
        except UnicodeDecodeError as exc:  # a file that is not UTF-8 text (spec, config)
            fail(f"a file is not UTF-8 text: byte {exc.start} cannot be read ({exc.reason})", code=ExitCode.BAD_INPUT)
        except RecursionError:
            fail("the input is nested too deeply", code=ExitCode.BAD_INPUT)
        except KeyboardInterrupt:
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


app = typer.Typer(
    name="spotfleet",
    help="A cost-aware autoscaler for GPU spot fleets.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=SpotfleetGroup,
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
    from spotfleet.cli import (
        config_cmd,
        cost,
        demo,
        explain,
        fleet,
        jobs,
        local,
        offerings,
        schema_cmd,
        server,
        simulate,
        tokens,
    )

    fleet.register(app)
    jobs.register(app)
    server.register(app)
    demo.register(app)
    local.register(app)
    explain.register(app)
    offerings.register(app)
    config_cmd.register(app)
    simulate.register(app)
    schema_cmd.register(app)
    app.add_typer(cost.app, name="cost")
    app.add_typer(tokens.app, name="token")


_register()
