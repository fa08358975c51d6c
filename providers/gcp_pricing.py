"""Optional price refresh from the Cloud Billing Catalog API (httpx).

Compute Engine sells a GPU VM as parts: vCPUs + memory of the machine family,
plus the attached GPUs, each a SKU of service ``6F81-5844-456A`` with a price
per hour (memory per GiB-hour). Spot SKUs have ``category.usageType ==
"Preemptible"`` and descriptions starting ``Spot Preemptible``. So::

    price(a3-highgpu-8g, spot, us-east4) = 208 × core + 1872 × ram + 8 × gpu

Design choice: a refresh may only *refine* the bundled catalog. An offering is
repriced only when all three parts were found for its region and market, and
the result is within ``tolerance`` × of the catalog price; otherwise the catalog
price stays and the offering is counted in ``skipped``. SKU descriptions are
matched by the table below, which is written from the public SKU list and has
not been run against the live API (see docs/gcp.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import httpx

from spotfleet.model.offering import Market, Offering, Offerings

COMPUTE_SERVICE = "6F81-5844-456A"
DEFAULT_ENDPOINT = "https://cloudbilling.googleapis.com"
PRICE_SOURCE = "gcp-billing-catalog"

# instance type prefix -> (core/ram SKU description prefix, GPU SKU description prefix)
FAMILY_SKUS: tuple[tuple[str, str, str], ...] = (
    ("a2-highgpu-", "A2 Instance", "Nvidia Tesla A100 GPU"),
    ("a2-megagpu-", "A2 Instance", "Nvidia Tesla A100 GPU"),
    ("a2-ultragpu-", "A2 Instance", "Nvidia A100 80GB GPU"),
    ("a3-highgpu-", "A3 Instance", "Nvidia H100 80GB GPU"),
    ("a3-megagpu-", "A3 Instance", "Nvidia H100 80GB Mega GPU"),
    ("a3-ultragpu-", "A3 Instance", "Nvidia H200 141GB GPU"),
    ("g2-standard-", "G2 Instance", "Nvidia L4 GPU"),
)
N1_GPU_SKUS = {
    "nvidia-tesla-t4": "Nvidia Tesla T4 GPU",
    "nvidia-tesla-v100": "Nvidia Tesla V100 GPU",
    "nvidia-tesla-p100": "Nvidia Tesla P100 GPU",
    "nvidia-tesla-p4": "Nvidia Tesla P4 GPU",
}
N1_FAMILY = "N1 Predefined Instance"


@dataclass(frozen=True, slots=True)
class Sku:
    description: str
    usage_type: str  # OnDemand | Preemptible | Commit1Yr ...
    regions: frozenset[str]
    hourly: float  # USD per unit-hour (per vCPU, per GiB, per GPU)

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Sku | None:
        try:
            rates = raw["pricingInfo"][0]["pricingExpression"]["tieredRates"]
            first = next(r for r in rates if float(r.get("startUsageAmount", 0)) == 0)
            price = first["unitPrice"]
            hourly = int(price.get("units", 0) or 0) + int(price.get("nanos", 0) or 0) / 1e9
            return cls(
                description=str(raw["description"]),
                usage_type=str(raw["category"]["usageType"]),
                regions=frozenset(raw.get("serviceRegions", ())),
                hourly=hourly,
            )
        except (KeyError, IndexError, StopIteration, TypeError, ValueError):
            return None


def fetch_skus(http: httpx.Client, *, api_key: str | None = None, page_size: int = 5000) -> list[Sku]:
    """Every Compute Engine SKU (paginated). Raises ``httpx.HTTPError`` on failure."""
    skus: list[Sku] = []
    params: dict[str, str] = {"currencyCode": "USD", "pageSize": str(page_size)}
    if api_key:
        params["key"] = api_key
    while True:
        resp = http.get(f"/v1/services/{COMPUTE_SERVICE}/skus", params=params)
        resp.raise_for_status()
        data = resp.json()
        skus.extend(s for s in map(Sku.parse, data.get("skus", [])) if s is not None)
        token = data.get("nextPageToken")
        if not token:
            return skus
        params["pageToken"] = token


def _parts(instance_type: str) -> tuple[str, str, int | None] | None:
    """(family SKU prefix, GPU SKU prefix, GPUs if attached) for an instance type."""
    if instance_type.startswith("n1-") and "+" in instance_type:
        count, _, accelerator = instance_type.partition("+")[2].partition("x")
        gpu = N1_GPU_SKUS.get(accelerator)
        return (N1_FAMILY, gpu, int(count)) if gpu else None
    for prefix, family, gpu in FAMILY_SKUS:
        if instance_type.startswith(prefix):
            return (family, gpu, None)
    return None


def _find(skus: Iterable[Sku], *, prefix: str, spot: bool, region: str) -> float | None:
    want = f"Spot Preemptible {prefix} running in" if spot else f"{prefix} running in"
    usage = "Preemptible" if spot else "OnDemand"
    for sku in skus:
        if sku.usage_type == usage and region in sku.regions and sku.description.startswith(want):
            return sku.hourly
    return None


@dataclass(frozen=True, slots=True)
class Repriced:
    offerings: Offerings
    updated: int
    skipped: int


def reprice(offerings: Iterable[Offering], skus: list[Sku], *, now: datetime, tolerance: float = 3.0) -> Repriced:
    """Offerings with prices from the SKUs where every part is known and sane."""
    out: list[Offering] = []
    updated = skipped = 0
    for offering in offerings:
        new = _price(offering, skus)
        catalog = offering.price_per_hour
        if new is None or not (catalog / tolerance <= new <= catalog * tolerance):
            out.append(offering)
            skipped += 1
            continue
        priced = offering.with_price(new, source=PRICE_SOURCE, observed_at=now)
        if offering.market is Market.ON_DEMAND:
            priced = replace(priced, on_demand_price_per_hour=new)
        out.append(priced)
        updated += 1
    return Repriced(Offerings(out), updated, skipped)


def _price(offering: Offering, skus: list[Sku]) -> float | None:
    parts = _parts(offering.instance_type)
    if parts is None:
        return None
    family, gpu, attached = parts
    spot = offering.market is Market.SPOT
    core = _find(skus, prefix=f"{family} Core", spot=spot, region=offering.region)
    ram = _find(skus, prefix=f"{family} Ram", spot=spot, region=offering.region)
    gpu_price = _find(skus, prefix=gpu, spot=spot, region=offering.region)
    if core is None or ram is None or gpu_price is None:
        return None
    gpus = attached if attached is not None else offering.gpu_count
    return round(offering.vcpus * core + offering.memory_gib * ram + gpus * gpu_price, 5)
