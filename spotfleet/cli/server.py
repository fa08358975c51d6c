"""Long-running commands: ``up`` (controller + API) and ``agent`` (node agent)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from spotfleet.cli.client import fail


def up(
    config: Path | None = typer.Option(None, "--config", "-c", help="controller config YAML"),
    db: str | None = typer.Option(None, "--db", help="database URL (default: SQLite in the data dir)"),
    host: str | None = typer.Option(None, "--host"),
    port: int | None = typer.Option(None, "--port"),
    data_dir: Path | None = typer.Option(None, "--data-dir"),
    log_format: str = typer.Option("text", "--log-format", help="text, or json (one object per line)"),
    api_workers: int | None = typer.Option(
        None, "--api-workers", min=0, max=64, help="serve the API from N processes in front of the step (PostgreSQL)"
    ),
) -> None:
    """Run the controller and its HTTP API until Ctrl-C (or SIGTERM); logs each decision in one line."""
    import signal

    from spotfleet.config import load_config
    from spotfleet.decisions import configure_logging, log_decisions
    from spotfleet.service import Service

    if log_format not in ("text", "json"):
        fail(f"--log-format {log_format!r}: choose text or json")
    configure_logging(log_format)
    from spotfleet import redact

    redact.install()
    cfg = load_config(config, overrides={"database": db, "api.host": host, "api.port": port,
                                         "data_dir": str(data_dir) if data_dir else None,
                                         "api.workers": api_workers})  # fmt: skip
    service = Service(cfg, log_format=log_format)
    service.store.event_listeners.append(log_decisions)
    log = logging.getLogger("spotfleet.up")
    log.info("spotfleet controller: cluster %s, store %s, providers %s", cfg.cluster, service.store.safe_url,
             ", ".join(sorted(service.providers)))  # fmt: skip
    if cfg.api.token is None:
        log.warning("no api.token: a request without a token from %s:%s is an admin (fine on a laptop; set "
                    "api.token before sharing the machine; scoped tokens still apply when sent)", cfg.api.host,
                    cfg.api.port)  # fmt: skip
    hold = service.store.fleet_hold(cfg.cluster)
    if hold is not None:
        log.warning("the fleet is down since %s (%s): nothing is bought until `spotfleet resume`", hold.since,
                    hold.reason)  # fmt: skip

    def _terminate(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # a service manager's stop is a Ctrl-C: stop cleanly

    signal.signal(signal.SIGTERM, _terminate)
    service.run_forever(
        on_ready=lambda: log.info("API and dashboard on %s/ — Ctrl-C stops it; state survives restarts", service.url)
    )
    log.info("stopped cleanly")


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
