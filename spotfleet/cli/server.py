"""Long-running commands: ``up`` (controller + API) and ``agent`` (node agent)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from spotfleet.cli.client import fail
from spotfleet.errors import InvalidSpec


def up(
    config: Path | None = typer.Option(None, "--config", "-c", help="controller config YAML"),
    db: str | None = typer.Option(None, "--db", help="database URL (default: SQLite in the data dir)"),
    host: str | None = typer.Option(None, "--host"),
    port: int | None = typer.Option(None, "--port"),
    data_dir: Path | None = typer.Option(None, "--data-dir"),
) -> None:
    """Run the controller and its HTTP API until Ctrl-C."""
    from spotfleet.config import load_config
    from spotfleet.service import Service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("apscheduler", "alembic", "httpx"):  # routine ticks and migrations are not news
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cfg = load_config(config, overrides={"database": db, "api.host": host, "api.port": port,
                                             "data_dir": str(data_dir) if data_dir else None})  # fmt: skip
        service = Service(cfg)
    except InvalidSpec as exc:
        fail(str(exc))
    typer.echo(f"spotfleet controller: cluster {cfg.cluster}, store {service.store.url}, "
               f"providers {', '.join(sorted(service.providers))}")  # fmt: skip
    try:
        service.run_forever(
            on_ready=lambda: typer.echo(f"API on {service.url} — Ctrl-C stops it; state survives restarts")
        )
    finally:
        typer.echo("stopped cleanly")


def agent(
    config: Path | None = typer.Option(None, "--config", help="agent YAML"),
    controller_url: str | None = typer.Option(None, "--controller-url"),
    token: str | None = typer.Option(None, "--token"),
    work_dir: Path | None = typer.Option(None, "--work-dir"),
) -> None:
    """Run the node agent (normally started by the node's bootstrap script)."""
    from spotfleet.agent.__main__ import main

    argv: list[str] = []
    for flag, value in (("--config", config), ("--controller-url", controller_url), ("--token", token),
                        ("--work-dir", work_dir)):  # fmt: skip
        if value is not None:
            argv += [flag, str(value)]
    raise typer.Exit(main(argv))


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(agent)
