"""GCP offerings: the bundled catalog, trimmed to what each zone really has.

Prices come from the bundled catalog (``spotfleet.catalog``); existence comes from
the API: ``machineTypes.list`` and ``acceleratorTypes.list`` per configured
zone. A catalog row whose machine type a zone does not offer is dropped (the
catalog is a snapshot; zones gain and lose types). Configured N1 shapes become
offerings where both the N1 type and the accelerator exist in the zone, sized
from ``machineTypes.list`` (vCPUs, memory).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from spotfleet.catalog import load_catalog
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.providers.gcp_config import (
    N1_ACCELERATOR_MEMORY_GIB,
    N1_ACCELERATOR_NAMES,
    GcpProviderConfig,
    N1GpuShape,
)
from spotfleet.providers.gcp_resources import PROVIDER, region_of


@dataclass(frozen=True, slots=True)
class ZoneInventory:
    """What one zone offers: machine types (name → vCPUs, memory GiB) and accelerator types."""

    sizes: dict[str, tuple[float, float]]  # machine type -> (vCPUs, memory GiB)
    accelerators: frozenset[str]


def configured_zones(config: GcpProviderConfig, catalog: Offerings) -> tuple[str, ...]:
    """``zones`` plus every catalog zone of ``regions``, in a stable order."""
    zones = list(config.zones)
    for region in config.regions:
        zones.extend(sorted({o.zone for o in catalog if o.region == region}))
    return tuple(dict.fromkeys(zones))


def n1_offerings(shape: N1GpuShape, zone: str, inventory: ZoneInventory) -> Iterable[Offering]:
    sizes = inventory.sizes.get(shape.machine_type)
    if sizes is None or shape.accelerator not in inventory.accelerators:
        return
    vcpus, memory = sizes
    base = Offering(
        provider=PROVIDER,
        region=region_of(zone),
        zone=zone,
        instance_type=shape.instance_type,
        gpu=N1_ACCELERATOR_NAMES[shape.accelerator],
        gpu_count=shape.count,
        gpu_memory_gib=N1_ACCELERATOR_MEMORY_GIB[shape.accelerator],
        vcpus=vcpus,
        memory_gib=memory,
        market=Market.ON_DEMAND,
        price_per_hour=shape.on_demand_price,
        on_demand_price_per_hour=shape.on_demand_price,
        price_source="config",
    )
    yield base
    if shape.spot_price is not None and shape.spot_price < shape.on_demand_price:
        yield replace(base, market=Market.SPOT, price_per_hour=shape.spot_price)


def build_offerings(
    config: GcpProviderConfig,
    inventories: dict[str, ZoneInventory],
    *,
    catalog: Offerings | None = None,
) -> Offerings:
    catalog = catalog if catalog is not None else load_catalog([PROVIDER])
    items = [o for o in catalog if o.zone in inventories and o.instance_type in inventories[o.zone].sizes]
    for zone, inventory in inventories.items():
        for shape in config.n1_gpus:
            items.extend(n1_offerings(shape, zone, inventory))
    return Offerings(items)
