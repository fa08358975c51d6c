"""The bundled GPU price catalog, loaded as offerings.

Reads CSVs in the schema of ``spotfleet/data/catalog/README.md``. The source has
known problems; this loader handles them rather than trusting them:

- an empty spot price means no spot offering for that row (never a price of 0);
- spot ≥ on-demand is a transcription artefact: the spot row is dropped;
- fractional-GPU types (``gpu_count`` < 1, e.g. g6f) are skipped: spotfleet
  places whole GPUs or MIG slices, not vGPU shares.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from spotfleet.model.interconnect import interconnect_of
from spotfleet.model.offering import Market, Offering, Offerings

CATALOG_FILES = {"aws": "aws_gpu_vms.csv", "gcp": "gcp_gpu_vms.csv"}

# Instance families whose multi-GPU shapes have NVLink/NVSwitch between GPUs.
_NVLINK_PREFIXES = ("p3.8", "p3.16", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "p6", "a2-", "a3-")


def has_nvlink(instance_type: str) -> bool:
    return instance_type.startswith(_NVLINK_PREFIXES)


@dataclass(frozen=True, slots=True)
class CatalogStats:
    rows: int
    offerings: int
    skipped_fractional: int
    missing_spot: int
    spot_not_cheaper: int


def _bundled(provider: str) -> Path:
    return Path(str(resources.files("spotfleet") / "data" / "catalog" / CATALOG_FILES[provider]))


def load_catalog(
    providers: Iterable[str] = ("aws", "gcp"),
    *,
    paths: dict[str, Path] | None = None,
    as_provider: str | None = None,
) -> Offerings:
    """Offerings for each row and market of the catalog.

    ``as_provider`` relabels every offering (the local and sim providers mirror
    real instance types under their own name).
    """
    offerings, _ = load_catalog_with_stats(providers, paths=paths, as_provider=as_provider)
    return offerings


def load_catalog_with_stats(
    providers: Iterable[str] = ("aws", "gcp"),
    *,
    paths: dict[str, Path] | None = None,
    as_provider: str | None = None,
) -> tuple[Offerings, CatalogStats]:
    items: list[Offering] = []
    rows = fractional = missing_spot = not_cheaper = 0
    for provider in providers:
        path = (paths or {}).get(provider) or _bundled(provider)
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                rows += 1
                gpu_count = float(row["gpu_count"])
                if gpu_count < 1:
                    fractional += 1
                    continue
                on_demand = float(row["on_demand_price"])
                base = {
                    "provider": as_provider or provider,
                    "region": row["region"],
                    "zone": row["zone_id"],
                    "instance_type": row["instance_type"],
                    "gpu": row["gpu"],
                    "gpu_count": int(gpu_count),
                    "gpu_memory_gib": float(row["gpu_memory_gib"]),
                    "vcpus": float(row["vcpus"]),
                    "memory_gib": float(row["memory_gib"]),
                    "on_demand_price_per_hour": on_demand,
                    "nvlink": has_nvlink(row["instance_type"]),
                    "interconnect": interconnect_of(row["instance_type"]).value,
                    "price_source": "catalog",
                }
                items.append(Offering(market=Market.ON_DEMAND, price_per_hour=on_demand, **base))  # type: ignore[arg-type]
                spot_text = (row.get("spot_price") or "").strip()
                if not spot_text:
                    missing_spot += 1
                    continue
                spot = float(spot_text)
                if spot <= 0 or spot >= on_demand:
                    not_cheaper += 1
                    continue
                items.append(Offering(market=Market.SPOT, price_per_hour=spot, **base))  # type: ignore[arg-type]
    stats = CatalogStats(rows, len(items), fractional, missing_spot, not_cheaper)
    return Offerings(items), stats
