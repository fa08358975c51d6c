"""``spotfleet offerings`` and ``spotfleet gpus``: what can be bought, at what
price, priced by whom — offline by default.

Every cloud is listed from the bundled catalog unless live prices can be had:
for AWS when boto3 is installed and credentials are found (or an endpoint is
given), the provider's own refresh (live EC2 spot prices, Price List on-demand,
catalog fallback per row). ``--prices catalog`` never calls a cloud;
``--prices live`` insists and fails with one line when it cannot. A price is
never shown without its source and age (``snapshot`` for the catalog).

``spotfleet gpus`` rolls the same offerings up per GPU model, like ``sky
show-gpus``: GPU memory, instance sizes, the cheapest on-demand and spot
$/GPU-hour and where, and how many clouds and regions sell it.
"""

from __future__ import annotations

import enum
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import typer

from spotfleet.cli import output
from spotfleet.cli.client import fail
from spotfleet.cli.output import Column, Format, TableView
from spotfleet.errors import MissingCredentials

CLOUDS = ("aws", "gcp")
PROVIDERS = ("all", *CLOUDS, "local")
CONFIG = typer.Option(None, "--config", "-c", help="controller config YAML (its providers.aws section)")
REGIONS = typer.Option([], "--region", help="region(s) to list (repeatable)")
PROVIDER = typer.Option("all", "--provider", "-p", help="all (every cloud), aws, gcp or local")
GPU = typer.Option(None, "--gpu", help="only this GPU model (e.g. H100)")


class Prices(enum.StrEnum):
    auto = "auto"  # live where credentials exist, else the catalog
    catalog = "catalog"
    live = "live"


PRICES = typer.Option(Prices.auto, "--prices", help="auto (live where credentials exist), catalog, or live")


def aws_credentials_found() -> bool:
    """True when boto3 is installed and finds credentials (env, profile, role)."""
    try:
        import boto3  # type: ignore[import-untyped]
    except ModuleNotFoundError:
        return False
    return boto3.Session().get_credentials() is not None


def _aws_live(*, config_path: Path | None, regions: list[str], endpoint_url: str | None) -> tuple[Any, list[str]]:
    from pydantic import ValidationError

    from spotfleet.clock import SystemClock
    from spotfleet.config import load_config
    from spotfleet.extras import requires
    from spotfleet.model.spec import format_validation_error
    from spotfleet.providers.aws_config import AwsProviderConfig

    with requires("aws", "live AWS prices"):
        from spotfleet.providers.aws import AwsProvider

    cfg = load_config(config_path)
    options: dict[str, Any] = dict(cfg.providers.get("aws") or {})
    if regions:
        options["regions"] = regions
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    try:
        aws_config = AwsProviderConfig.model_validate(options)
    except ValidationError as exc:
        raise format_validation_error(exc, prefix="providers.aws", docs="docs/aws.md") from None
    provider = AwsProvider(aws_config, cluster=cfg.cluster, clock=SystemClock())
    offerings = provider.refresh_prices(force=True)
    report = provider.price_report
    notes = [
        f"aws spot prices: {report.spot_live} live (DescribeSpotPriceHistory), {report.spot_catalog} from the "
        f"bundled catalog ({report.spot_implausible} implausible live prices replaced)",
        f"aws on-demand prices: {report.on_demand_live} live (Price List API), {report.on_demand_catalog} from the "
        "catalog",
    ]
    if report.unpriced:
        notes.append(f"left out, no on-demand price anywhere: {', '.join(report.unpriced)}")
    notes.extend(f"refresh failed: {e}" for e in report.errors)
    return offerings, notes


def collect(
    provider: str, *, prices: Prices, config_path: Path | None = None, regions: list[str] | None = None,
    endpoint_url: str | None = None,
) -> tuple[list[Any], list[str]]:  # fmt: skip
    """Offerings of one provider (or every cloud) and a note on where each price came from."""
    from spotfleet.catalog import load_catalog

    if provider not in PROVIDERS:
        import difflib

        guess = difflib.get_close_matches(provider, PROVIDERS, n=1)
        hint = f" (did you mean {guess[0]!r}?)" if guess else ""
        fail(f"--provider {provider!r}{hint}: choose from {', '.join(PROVIDERS)}")
    if provider == "local":
        from spotfleet.providers.local import local_offerings

        return list(local_offerings()), ["local instances mirror real shapes, priced from the bundled catalog"]
    items: list[Any] = []
    notes: list[str] = []
    for cloud in CLOUDS if provider == "all" else (provider,):
        live_possible = cloud == "aws" and (endpoint_url is not None or aws_credentials_found())
        if prices is Prices.live and not live_possible:
            if cloud == "aws":
                raise MissingCredentials(
                    "live AWS prices need credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or an "
                    "instance role) and the aws extra; --prices catalog works offline"
                )
            fail(f"{cloud}: live prices are not available in this command; use --prices catalog")
        if prices is not Prices.catalog and live_possible:
            found, cloud_notes = _aws_live(config_path=config_path, regions=regions or [], endpoint_url=endpoint_url)
            items.extend(found)
            notes.extend(cloud_notes)
            continue
        items.extend(load_catalog((cloud,)))
        why = "no AWS credentials found" if cloud == "aws" and prices is Prices.auto else "offline"
        notes.append(f"{cloud}: bundled catalog snapshot ({why}; skypilot-catalog v8)")
    return items, notes


def _filter(items: list[Any], *, regions: list[str], gpu: str | None, market: str | None) -> list[Any]:
    if regions:
        items = [o for o in items if o.region in regions]
    if gpu:
        items = [o for o in items if o.gpu.upper() == gpu.upper()]
    if market:
        items = [o for o in items if o.market.value == market]
    return items


def _age(observed_at: Any, now: Any) -> str:
    if observed_at is None:
        return "snapshot"
    from spotfleet.model.durations import format_duration

    return format_duration(now - observed_at)


def offering_dict(o: Any) -> dict[str, Any]:
    return {
        "provider": o.provider, "region": o.region, "zone": o.zone, "instance_type": o.instance_type,
        "gpu": o.gpu, "gpu_count": o.gpu_count, "gpu_memory_gib": o.gpu_memory_gib, "market": o.market.value,
        "price_per_hour": o.price_per_hour, "price_per_gpu_hour": round(o.price_per_gpu_hour, 6),
        "on_demand_price_per_hour": o.on_demand_price_per_hour, "price_source": o.price_source,
        "price_observed_at": o.price_observed_at.isoformat() if o.price_observed_at else None,
    }  # fmt: skip


def offerings(
    provider: str = PROVIDER,
    config: Path | None = CONFIG,
    region: list[str] = REGIONS,
    endpoint_url: str | None = typer.Option(None, "--endpoint-url", help="AWS endpoint (e.g. a moto server)"),
    gpu: str | None = GPU,
    market: str | None = typer.Option(None, "--market", help="spot or on_demand"),
    prices: Prices = PRICES,
    limit: int = typer.Option(40, "--limit", help="rows to show, cheapest per GPU-hour first (0 = all)"),
    fmt: Format = output.OUTPUT,
    as_json: bool = output.JSON_ALIAS,
) -> None:
    """List GPU offerings of every cloud with price, price source and price age (offline by default)."""
    from spotfleet.clock import utcnow

    if market not in (None, "spot", "on_demand"):
        fail(f"--market {market!r}: choose spot or on_demand")
    items, notes = collect(provider, prices=prices, config_path=config, regions=region, endpoint_url=endpoint_url)
    rows = sorted(_filter(items, regions=region, gpu=gpu, market=market), key=lambda o: (o.price_per_gpu_hour, o.key))
    shown = rows[:limit] if limit else rows
    now = utcnow()
    fmt = output.resolve(fmt, as_json)
    if fmt in (Format.json, Format.yaml):
        for note in notes:
            typer.echo(f"note: {note}", err=True)

    def view(_data: Any, wide: bool) -> TableView:
        return TableView(
            columns=[
                Column("PROVIDER", lambda o: o.provider),
                Column("REGION", lambda o: o.region),
                Column("ZONE", lambda o: o.zone),
                Column("INSTANCE TYPE", lambda o: o.instance_type),
                Column("GPUS", lambda o: f"{o.gpu_count}× {o.gpu}"),
                Column("GPU MEM", lambda o: f"{o.gpu_memory_gib:.0f} GiB", wide_only=True, justify="right"),
                Column("VCPUS", lambda o: f"{o.vcpus:g}", wide_only=True, justify="right"),
                Column("MARKET", lambda o: o.market.value),
                Column("$/H", lambda o: f"{o.price_per_hour:.4f}", justify="right"),
                Column("$/GPU-H", lambda o: f"{o.price_per_gpu_hour:.4f}", justify="right"),
                Column("ON-DEMAND $/H", lambda o: f"{o.on_demand_price_per_hour:.4f}", wide_only=True, justify="right"),
                Column("PRICE SOURCE", lambda o: o.price_source),
                Column("PRICE AGE", lambda o: _age(o.price_observed_at, now)),
            ],
            rows=shown,
            title=f"{provider} offerings ({len(shown)} of {len(rows)}, cheapest per GPU-hour first)",
            notes=notes,
        )

    output.emit([offering_dict(o) for o in shown], fmt, view)


def gpu_summary(items: list[Any]) -> list[dict[str, Any]]:
    """One row per GPU model: memory, sizes, cheapest $/GPU-h on each market and where."""
    by_gpu: dict[str, list[Any]] = defaultdict(list)
    for o in items:
        by_gpu[o.gpu].append(o)
    out = []
    for name, group in by_gpu.items():
        row: dict[str, Any] = {
            "gpu": name,
            "gpu_memory_gib": max(o.gpu_memory_gib for o in group),
            "counts": sorted({o.gpu_count for o in group}),
            "providers": sorted({o.provider for o in group}),
            "regions": len({(o.provider, o.region) for o in group}),
            "instance_types": len({(o.provider, o.instance_type) for o in group}),
        }
        for market in ("on_demand", "spot"):
            offers = [o for o in group if o.market.value == market]
            best = min(offers, key=lambda o: (o.price_per_gpu_hour, o.key)) if offers else None
            row[f"{market}_per_gpu_hour"] = round(best.price_per_gpu_hour, 6) if best else None
            row[f"{market}_cheapest"] = f"{best.provider} {best.instance_type} {best.zone}" if best else None
        out.append(row)
    return sorted(out, key=lambda r: (r["on_demand_per_gpu_hour"] or r["spot_per_gpu_hour"] or 0.0, r["gpu"]))


def gpus(
    gpu: str | None = typer.Argument(None, help="a GPU model for its instance types and prices (e.g. H100)"),
    provider: str = PROVIDER,
    region: list[str] = REGIONS,
    prices: Prices = typer.Option(Prices.catalog, "--prices", help="catalog (default), auto or live"),
    config: Path | None = CONFIG,
    fmt: Format = output.OUTPUT,
) -> None:
    """GPU models for sale across clouds, cheapest $/GPU-hour on-demand and spot (like `sky show-gpus`)."""
    items, notes = collect(provider, prices=prices, config_path=config, regions=region)
    items = _filter(items, regions=region, gpu=gpu, market=None)
    if gpu and not items:
        import difflib

        known = sorted({o.gpu for o in collect(provider, prices=Prices.catalog)[0]})
        guess = difflib.get_close_matches(gpu.upper(), [k.upper() for k in known], n=1)
        hint = f"; did you mean {guess[0]!r}?" if guess else ""
        fail(f"no offerings with GPU {gpu!r}{hint} (known: {', '.join(known)})")
    if fmt in (Format.json, Format.yaml):
        for note in notes:
            typer.echo(f"note: {note}", err=True)
    if gpu:
        _gpu_detail(items, fmt, notes)
        return
    rows = gpu_summary(items)

    def money(v: float | None) -> str:
        return f"${v:,.2f}" if v is not None else "-"

    def view(data: list[dict[str, Any]], wide: bool) -> TableView:
        return TableView(
            columns=[
                Column("GPU", lambda r: r["gpu"]),
                Column("MEM", lambda r: f"{r['gpu_memory_gib']:.0f} GiB", justify="right"),
                Column("COUNTS", lambda r: ",".join(str(c) for c in r["counts"])),
                Column("CLOUDS", lambda r: ",".join(r["providers"])),
                Column("REGIONS", lambda r: r["regions"], justify="right", wide_only=True),
                Column("ON-DEMAND $/GPU-H", lambda r: money(r["on_demand_per_gpu_hour"]), justify="right"),
                Column("WHERE", lambda r: r["on_demand_cheapest"], wide_only=True),
                Column("SPOT $/GPU-H", lambda r: money(r["spot_per_gpu_hour"]), justify="right"),
                Column("WHERE ", lambda r: r["spot_cheapest"], wide_only=True),
            ],
            rows=data,
            title=f"{len(data)} GPU models — `spotfleet gpus H100` for one model's offerings",
            notes=notes,
        )

    output.emit(rows, fmt, view)


def _gpu_detail(items: list[Any], fmt: Format, notes: list[str]) -> None:
    """One GPU model: each (provider, instance type) with its cheapest region per market."""
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for o in items:
        groups[(o.provider, o.instance_type)].append(o)
    rows = []
    for (prov, itype), group in sorted(groups.items(), key=lambda kv: (kv[1][0].gpu_count, kv[0])):
        first = group[0]
        row: dict[str, Any] = {"provider": prov, "instance_type": itype, "gpu": first.gpu,
                               "gpu_count": first.gpu_count, "gpu_memory_gib": first.gpu_memory_gib,
                               "vcpus": first.vcpus, "memory_gib": first.memory_gib}  # fmt: skip
        for market in ("on_demand", "spot"):
            offers = [o for o in group if o.market.value == market]
            best = min(offers, key=lambda o: (o.price_per_hour, o.key)) if offers else None
            row[f"{market}_per_hour"] = best.price_per_hour if best else None
            row[f"{market}_where"] = best.zone if best else None
        rows.append(row)

    def money(v: float | None) -> str:
        return f"${v:,.2f}" if v is not None else "-"

    def view(data: list[dict[str, Any]], wide: bool) -> TableView:
        return TableView(
            columns=[
                Column("PROVIDER", lambda r: r["provider"]),
                Column("INSTANCE TYPE", lambda r: r["instance_type"]),
                Column("GPUS", lambda r: f"{r['gpu_count']}× {r['gpu']}"),
                Column("GPU MEM", lambda r: f"{r['gpu_memory_gib']:.0f} GiB", justify="right"),
                Column("VCPUS", lambda r: f"{r['vcpus']:g}", justify="right", wide_only=True),
                Column("MEMORY", lambda r: f"{r['memory_gib']:g} GiB", justify="right", wide_only=True),
                Column("ON-DEMAND $/H", lambda r: money(r["on_demand_per_hour"]), justify="right"),
                Column("WHERE", lambda r: r["on_demand_where"], wide_only=True),
                Column("SPOT $/H", lambda r: money(r["spot_per_hour"]), justify="right"),
                Column("WHERE ", lambda r: r["spot_where"], wide_only=True),
            ],
            rows=data,
            notes=notes,
        )

    output.emit(rows, fmt, view)
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command()(offerings)
    app.command()(gpus)
