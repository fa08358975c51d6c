"""What can be bought on EC2 and at what price: the AWS provider's offerings.

Three kinds of facts, refreshed on their own schedules:

1. *Shapes* (daily): GPU instance types from ``DescribeInstanceTypes`` (NVIDIA
   only, whole GPUs only), zones from ``DescribeAvailabilityZones`` (zone name ↔
   AZ id: the bundled catalog is keyed by AZ id, because zone names are shuffled
   per account while ids are not) and which type is sold in which zone from
   ``DescribeInstanceTypeOfferings``.
2. *Spot prices* (every ``price_refresh_interval_s``): ``DescribeSpotPriceHistory``
   from now, paginated, the latest point per type × zone.
3. *On-demand prices* (daily): the Price List API (``pricing:GetProducts``) where
   reachable, the bundled catalog otherwise.

Every offering says where its price came from (``price_source``) and when it was
observed (``price_observed_at``; ``None`` for the bundled snapshot). A price is
never invented: a type with no on-demand price anywhere is left out and counted
in ``PriceReport.unpriced``; a live spot price that is implausible (≤ 0, or under
1 % of on-demand, as moto's 0.00001 placeholder is) is replaced by the catalog's
and counted. When a refresh fails, the previous prices are kept and age; the
error is recorded in the report for ``spotfleet offerings`` to show.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from spotfleet.catalog import has_nvlink, load_catalog
from spotfleet.clock import Clock
from spotfleet.errors import ProviderError
from spotfleet.model.interconnect import Interconnect
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.providers.aws_clients import AwsClients
from spotfleet.providers.aws_config import AwsProviderConfig
from spotfleet.providers.aws_errors import AWS_ERRORS, translate

log = logging.getLogger(__name__)

PROVIDER = "aws"
SOURCE_SPOT_HISTORY = "ec2-spot-price-history"
SOURCE_PRICING_API = "aws-pricing-api"
SOURCE_CATALOG = "catalog"
PRODUCT_DESCRIPTIONS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]
MIN_PLAUSIBLE_SPOT_RATIO = 0.01
_CHUNK = 100  # values per filter / instance types per spot-history call


@dataclass(frozen=True, slots=True)
class Zone:
    region: str
    name: str
    zone_id: str


@dataclass(frozen=True, slots=True)
class GpuType:
    instance_type: str
    gpu: str
    gpu_count: int
    gpu_memory_gib: float
    vcpus: float
    memory_gib: float


@dataclass(frozen=True, slots=True)
class Quote:
    price: float
    source: str
    observed_at: datetime | None
    since: datetime | None = None  # when the cloud last changed this price


@dataclass(frozen=True, slots=True)
class PriceReport:
    """How fresh and complete the last refresh was (``spotfleet offerings`` prints it)."""

    refreshed_at: datetime | None = None
    spot_live: int = 0
    spot_catalog: int = 0
    spot_implausible: int = 0
    on_demand_live: int = 0
    on_demand_catalog: int = 0
    unpriced: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(slots=True)
class _RegionFacts:
    types: dict[str, GpuType] = field(default_factory=dict)
    zones: list[Zone] = field(default_factory=list)
    sold_in: set[tuple[str, str]] = field(default_factory=set)  # (type, zone name)
    shapes_at: datetime | None = None
    spot: dict[tuple[str, str], Quote] = field(default_factory=dict)  # (type, zone name)
    spot_at: datetime | None = None
    on_demand: dict[str, Quote] = field(default_factory=dict)  # type
    on_demand_at: datetime | None = None
    efa: set[str] = field(default_factory=set)  # types with NetworkInfo.EfaSupported


def _chunks(items: Sequence[str], size: int = _CHUNK) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def gpu_type_from_api(item: dict[str, Any], *, architectures: Sequence[str] = ("x86_64",)) -> GpuType | None:
    """A ``GpuType`` from one DescribeInstanceTypes entry.

    ``None`` unless it has whole NVIDIA GPUs and runs one of ``architectures``
    (the AMI's: an x86_64 image does not boot on a g5g).
    """
    supported = (item.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ["x86_64"]
    if not set(supported) & set(architectures):
        return None
    gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        return None
    first = gpus[0]
    if str(first.get("Manufacturer", "")).upper() != "NVIDIA":
        return None
    count = int(first.get("Count") or 0)
    if count < 1 or float(first.get("GpuPartitionSize", 1.0) or 1.0) < 1.0:
        return None  # fractional (g6f): spotfleet places whole GPUs
    return GpuType(
        instance_type=item["InstanceType"],
        gpu=str(first.get("Name", "?")),
        gpu_count=count,
        gpu_memory_gib=round(float((first.get("MemoryInfo") or {}).get("SizeInMiB", 0)) / 1024, 3),
        vcpus=float(item.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
        memory_gib=round(float(item.get("MemoryInfo", {}).get("SizeInMiB", 0)) / 1024, 3),
    )


def on_demand_price_from_price_list(entries: Iterable[str]) -> float | None:
    """The hourly USD price in GetProducts ``PriceList`` entries (JSON strings)."""
    for entry in entries:
        product = json.loads(entry)
        for term in (product.get("terms", {}).get("OnDemand") or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                if str(dim.get("unit", "Hrs")).lower().startswith("hr"):
                    usd = float((dim.get("pricePerUnit") or {}).get("USD", "0") or 0)
                    if usd > 0:
                        return usd
    return None


class AwsOfferingSource:
    """Offerings of one AWS account, cached and refreshed on schedule."""

    def __init__(
        self,
        config: AwsProviderConfig,
        *,
        clients: AwsClients,
        clock: Clock,
        catalog: Offerings | None = None,
    ) -> None:
        self._config = config
        self._clients = clients
        self._clock = clock
        self._catalog = catalog if catalog is not None else load_catalog(("aws",))
        self._facts: dict[str, _RegionFacts] = {r: _RegionFacts() for r in config.regions}
        self._offerings: Offerings | None = None
        self._lock = threading.RLock()
        self.report = PriceReport()
        self._catalog_on_demand: dict[tuple[str, str], float] = {}
        self._catalog_spot: dict[tuple[str, str], float] = {}
        self._catalog_gpu_name: dict[str, str] = {}
        for o in self._catalog:
            self._catalog_gpu_name.setdefault(o.instance_type, o.gpu)
            if o.market is Market.ON_DEMAND:
                self._catalog_on_demand[(o.region, o.instance_type)] = o.price_per_hour
            else:
                self._catalog_spot[(o.zone, o.instance_type)] = o.price_per_hour

    # -- public ---------------------------------------------------------------------------

    def offerings(self) -> Offerings:
        """Current offerings, refreshing whatever is due first."""
        with self._lock:
            if self._offerings is None or self._due():
                self.refresh()
            assert self._offerings is not None
            return self._offerings

    def zones(self, region: str) -> list[Zone]:
        with self._lock:
            facts = self._facts[region]
            if not facts.zones:
                self._refresh_shapes(region, facts)
            return list(facts.zones)

    def zone_named(self, name: str) -> Zone | None:
        """The zone with this name or AZ id in any configured region."""
        for region in self._config.regions:
            for zone in self.zones(region):
                if name in (zone.name, zone.zone_id):
                    return zone
        return None

    def refresh(self, *, force: bool = False) -> Offerings:
        """Refresh what is due (everything with ``force``) and rebuild the offerings.

        A plain method so APScheduler, the CLI and tests all call the same step.
        Shape errors propagate (nothing can be offered without them); price errors
        are recorded and the previous or catalog prices are used.
        """
        with self._lock:
            now = self._clock.now()
            errors: list[str] = []
            for region, facts in self._facts.items():
                if force or self._stale(facts.shapes_at, self._config.instance_type_refresh_interval_s):
                    self._refresh_shapes(region, facts)
                if force or self._stale(facts.spot_at, self._config.price_refresh_interval_s):
                    try:
                        self._refresh_spot(region, facts)
                    except ProviderError as err:
                        errors.append(f"spot prices {region}: {err}")
                        log.warning("spot price refresh failed in %s: %s", region, err)
                if force or self._stale(facts.on_demand_at, self._config.instance_type_refresh_interval_s):
                    errors.extend(self._refresh_on_demand(region, facts))
            self._offerings = self._build(now, errors)
            return self._offerings

    # -- refresh steps --------------------------------------------------------------------

    def _stale(self, at: datetime | None, interval_s: float) -> bool:
        return at is None or self._clock.now() - at >= timedelta(seconds=interval_s)

    def _due(self) -> bool:
        return any(
            self._stale(f.shapes_at, self._config.instance_type_refresh_interval_s)
            or self._stale(f.spot_at, self._config.price_refresh_interval_s)
            for f in self._facts.values()
        )

    def _refresh_shapes(self, region: str, facts: _RegionFacts) -> None:
        ec2 = self._clients.ec2(region)
        try:
            types: dict[str, GpuType] = {}
            efa: set[str] = set()
            pages = ec2.get_paginator("describe_instance_types").paginate(
                Filters=[{"Name": "instance-type", "Values": list(self._config.instance_type_patterns)}]
            )
            for page in pages:
                for item in page.get("InstanceTypes", []):
                    gpu_type = gpu_type_from_api(item, architectures=self._config.architectures)
                    if (item.get("NetworkInfo") or {}).get("EfaSupported"):
                        efa.add(str(item.get("InstanceType")))
                    if gpu_type is not None:
                        name = self._catalog_gpu_name.get(gpu_type.instance_type, gpu_type.gpu)
                        types[gpu_type.instance_type] = GpuType(
                            gpu_type.instance_type,
                            name,
                            gpu_type.gpu_count,
                            gpu_type.gpu_memory_gib,
                            gpu_type.vcpus,
                            gpu_type.memory_gib,
                        )
            azs = ec2.describe_availability_zones(Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}])[
                "AvailabilityZones"
            ]
            zones = [
                Zone(region, z["ZoneName"], z["ZoneId"]) for z in azs if z.get("State", "available") == "available"
            ]
            sold_in: set[tuple[str, str]] = set()
            for chunk in _chunks(sorted(types)):
                pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
                    LocationType="availability-zone",
                    Filters=[{"Name": "instance-type", "Values": chunk}],
                )
                for page in pages:
                    for item in page.get("InstanceTypeOfferings", []):
                        sold_in.add((item["InstanceType"], item["Location"]))
        except AWS_ERRORS as err:
            raise translate(err, operation="DescribeInstanceTypes") from err
        facts.types, facts.zones, facts.sold_in, facts.efa = types, zones, sold_in, efa
        facts.shapes_at = self._clock.now()

    def _refresh_spot(self, region: str, facts: _RegionFacts) -> None:
        ec2 = self._clients.ec2(region)
        now = self._clock.now()
        latest: dict[tuple[str, str], Quote] = {}
        try:
            for chunk in _chunks(sorted(facts.types)):
                pages = ec2.get_paginator("describe_spot_price_history").paginate(
                    InstanceTypes=chunk,
                    ProductDescriptions=PRODUCT_DESCRIPTIONS,
                    StartTime=now,
                )
                for page in pages:
                    for point in page.get("SpotPriceHistory", []):
                        key = (point["InstanceType"], point["AvailabilityZone"])
                        since = point.get("Timestamp")
                        seen = latest.get(key)
                        if seen is None or (since and seen.since and since > seen.since):
                            latest[key] = Quote(float(point["SpotPrice"]), SOURCE_SPOT_HISTORY, now, since)
        except AWS_ERRORS as err:
            raise translate(err, operation="DescribeSpotPriceHistory") from err
        facts.spot, facts.spot_at = latest, now

    def _refresh_on_demand(self, region: str, facts: _RegionFacts) -> list[str]:
        """Live on-demand prices where the Price List API answers; errors as text."""
        now = self._clock.now()
        facts.on_demand_at = now
        if self._config.on_demand_price_source != "pricing-api":
            return []
        pricing = self._clients.pricing()
        quotes: dict[str, Quote] = {}
        for instance_type in sorted(facts.types):
            try:
                response = pricing.get_products(
                    ServiceCode="AmazonEC2",
                    Filters=[
                        {"Type": "TERM_MATCH", "Field": field_name, "Value": value}
                        for field_name, value in (
                            ("instanceType", instance_type),
                            ("regionCode", region),
                            ("operatingSystem", "Linux"),
                            ("tenancy", "Shared"),
                            ("preInstalledSw", "NA"),
                            ("capacitystatus", "Used"),
                        )
                    ],
                    MaxResults=10,
                )
            except AWS_ERRORS as err:
                # One failure means the API is unreachable or denied: stop asking
                # (60 failing calls help nobody) and use the catalog this round.
                text = str(translate(err, operation="pricing:GetProducts"))
                log.info("on-demand prices from the catalog for %s: %s", region, text)
                facts.on_demand = {**facts.on_demand, **quotes}
                return [f"on-demand prices {region}: {text}"]
            price = on_demand_price_from_price_list(response.get("PriceList", []))
            if price is not None:
                quotes[instance_type] = Quote(price, SOURCE_PRICING_API, now)
        facts.on_demand = quotes
        return []

    # -- assembling offerings -------------------------------------------------------------

    def _allowed_zones(self, region: str, zones: list[Zone]) -> list[Zone]:
        configured = [z for z in zones if self._config.subnets_for(zone_name=z.name, zone_id=z.zone_id)]
        return configured or zones

    def _on_demand_quote(self, region: str, facts: _RegionFacts, instance_type: str) -> Quote | None:
        live = facts.on_demand.get(instance_type)
        if live is not None:
            return live
        price = self._catalog_on_demand.get((region, instance_type))
        return Quote(price, SOURCE_CATALOG, None) if price is not None else None

    def _spot_quote(
        self, facts: _RegionFacts, gpu_type: str, zone: Zone, on_demand: float
    ) -> tuple[Quote | None, bool]:
        """(quote, implausible live price replaced)."""
        live = facts.spot.get((gpu_type, zone.name))
        if live is not None and live.price > 0 and live.price >= MIN_PLAUSIBLE_SPOT_RATIO * on_demand:
            return live, False
        price = self._catalog_spot.get((zone.zone_id, gpu_type))
        quote = Quote(price, SOURCE_CATALOG, None) if price is not None else None
        return quote, live is not None

    def _build(self, now: datetime, errors: list[str]) -> Offerings:
        items: list[Offering] = []
        spot_live = spot_catalog = implausible = od_live = od_catalog = 0
        unpriced: set[str] = set()
        for region, facts in self._facts.items():
            zones = self._allowed_zones(region, facts.zones)
            for name, gpu_type in sorted(facts.types.items()):
                od = self._on_demand_quote(region, facts, name)
                if od is None:
                    unpriced.add(f"{region}/{name}")
                    continue
                for zone in zones:
                    if facts.sold_in and (name, zone.name) not in facts.sold_in:
                        continue
                    base = Offering(
                        provider=PROVIDER,
                        region=region,
                        zone=zone.name,
                        instance_type=name,
                        gpu=gpu_type.gpu,
                        gpu_count=gpu_type.gpu_count,
                        gpu_memory_gib=gpu_type.gpu_memory_gib,
                        vcpus=gpu_type.vcpus,
                        memory_gib=gpu_type.memory_gib,
                        market=Market.ON_DEMAND,
                        price_per_hour=od.price,
                        on_demand_price_per_hour=od.price,
                        price_source=od.source,
                        price_observed_at=od.observed_at,
                        nvlink=has_nvlink(name),
                        interconnect=(Interconnect.EFA if name in facts.efa else Interconnect.TCP).value,
                        extra=(("az_id", zone.zone_id),),
                    )
                    items.append(base)
                    if od.source == SOURCE_CATALOG:
                        od_catalog += 1
                    else:
                        od_live += 1
                    spot, replaced = self._spot_quote(facts, name, zone, od.price)
                    implausible += replaced
                    if spot is None:
                        continue
                    extra = base.extra
                    if spot.since is not None:
                        extra = (*extra, ("spot_price_since", spot.since.isoformat()))
                    items.append(
                        replace(
                            base,
                            market=Market.SPOT,
                            price_per_hour=spot.price,
                            price_source=spot.source,
                            price_observed_at=spot.observed_at,
                            extra=extra,
                        )
                    )
                    if spot.source == SOURCE_CATALOG:
                        spot_catalog += 1
                    else:
                        spot_live += 1
        self.report = PriceReport(
            refreshed_at=now,
            spot_live=spot_live,
            spot_catalog=spot_catalog,
            spot_implausible=implausible,
            on_demand_live=od_live,
            on_demand_catalog=od_catalog,
            unpriced=tuple(sorted(unpriced)),
            errors=tuple(errors),
        )
        return Offerings(items)
