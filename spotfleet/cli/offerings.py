"""``spotfleet offerings``: what a provider sells now, at what price, priced by whom.

Prices are never shown without their source and age: a live EC2 spot price
observed a minute ago, an on-demand price from the AWS Price List API, or the
bundled catalog snapshot (age unknown, shown as ``snapshot``). For AWS the
footer says how many prices were live, how many fell back to the catalog and
which refreshes failed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from spotfleet.cli.client import fail
from spotfleet.errors import InvalidSpec, ProviderError

PROVIDERS = ("aws", "gcp", "local")
CONFIG = typer.Option(None, "--config", "-c", help="controller config YAML (providers.aws section)")
REGIONS = typer.Option([], "--region", help="region(s) to list (repeatable)")


def _aws_offerings(*, config_path: Path | None, regions: list[str], endpoint_url: str | None) -> tuple[Any, list[str]]:
    from pydantic import ValidationError

    from spotfleet.clock import SystemClock
    from spotfleet.config import load_config
    from spotfleet.model.spec import format_validation_error
    from spotfleet.providers.aws import AwsProvider, AwsProviderConfig

    cfg = load_config(config_path)
    options: dict[str, Any] = dict(cfg.providers.get("aws") or {})
    if regions:
        options["regions"] = regions
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    try:
        aws_config = AwsProviderConfig.model_validate(options)
    except ValidationError as exc:
        err = format_validation_error(exc, prefix="providers.aws")
        raise InvalidSpec(err.field, err.message) from None
    provider = AwsProvider(aws_config, cluster=cfg.cluster, clock=SystemClock())
    offerings = provider.refresh_prices(force=True)
    report = provider.price_report
    notes = [
        f"spot prices: {report.spot_live} live (DescribeSpotPriceHistory), {report.spot_catalog} from the "
        f"bundled catalog ({report.spot_implausible} implausible live prices replaced)",
        f"on-demand prices: {report.on_demand_live} live (Price List API), {report.on_demand_catalog} from the catalog",
    ]
    if report.unpriced:
        notes.append(f"left out, no on-demand price anywhere: {', '.join(report.unpriced)}")
    notes.extend(f"refresh failed: {e}" for e in report.errors)
    return offerings, notes


def _offerings_for(
    provider: str, *, config_path: Path | None, regions: list[str], endpoint_url: str | None
) -> tuple[Any, list[str]]:
    if provider == "aws":
        return _aws_offerings(config_path=config_path, regions=regions, endpoint_url=endpoint_url)
    if provider == "local":
        from spotfleet.providers.local import local_offerings

        return local_offerings(), ["local instances mirror real shapes priced from the bundled catalog"]
    from spotfleet.catalog import load_catalog

    return load_catalog((provider,)), [
        f"{provider}: bundled catalog prices (no live {provider} prices in this command)"
    ]


def _age(observed_at: Any, now: Any) -> str:
    if observed_at is None:
        return "snapshot"
    from spotfleet.model.durations import format_duration

    return format_duration(now - observed_at)


def offerings(
    provider: str = typer.Option("aws", "--provider", "-p", help="aws, gcp or local"),
    config: Path | None = CONFIG,
    region: list[str] = REGIONS,
    endpoint_url: str | None = typer.Option(None, "--endpoint-url", help="AWS endpoint (e.g. a moto server)"),
    gpu: str | None = typer.Option(None, "--gpu", help="only this GPU model (e.g. H100)"),
    market: str | None = typer.Option(None, "--market", help="spot or on_demand"),
    limit: int = typer.Option(40, "--limit", help="rows to show, cheapest per GPU-hour first (0 = all)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON lines instead of a table"),
) -> None:
    """List GPU offerings with price, price source and price age."""
    from spotfleet.clock import utcnow

    if provider not in PROVIDERS:
        fail(f"--provider must be one of {', '.join(PROVIDERS)}")
    try:
        items, notes = _offerings_for(provider, config_path=config, regions=region, endpoint_url=endpoint_url)
    except (InvalidSpec, ProviderError) as exc:
        fail(f"{provider}: {exc}")
    if region:
        items = items.where(lambda o: o.region in region)
    if gpu:
        items = items.where(lambda o: o.gpu.upper() == gpu.upper())
    if market:
        items = items.where(lambda o: o.market.value == market)
    rows = sorted(items, key=lambda o: (o.price_per_gpu_hour, o.key))
    shown = rows[:limit] if limit else rows
    now = utcnow()
    if as_json:
        for o in shown:
            typer.echo(json.dumps({
                "provider": o.provider, "region": o.region, "zone": o.zone, "instance_type": o.instance_type,
                "gpu": o.gpu, "gpu_count": o.gpu_count, "market": o.market.value,
                "price_per_hour": o.price_per_hour, "price_source": o.price_source,
                "price_observed_at": o.price_observed_at.isoformat() if o.price_observed_at else None,
            }))  # fmt: skip
        return
    table = Table(title=f"{provider} offerings ({len(shown)} of {len(rows)}, cheapest per GPU-hour first)")
    for column in ("region", "zone", "instance type", "GPUs", "market", "$/h", "$/GPU-h", "price source", "price age"):
        table.add_column(column, justify="right" if column.startswith("$") else "left")
    for o in shown:
        table.add_row(
            o.region, o.zone, o.instance_type, f"{o.gpu_count}× {o.gpu}", o.market.value,
            f"{o.price_per_hour:.4f}", f"{o.price_per_gpu_hour:.4f}", o.price_source, _age(o.price_observed_at, now),
        )  # fmt: skip
    console = Console(width=160)
    console.print(table)
    for note in notes:
        console.print(f"[dim]{note}[/dim]")


def register(app: typer.Typer) -> None:
    app.command()(offerings)
