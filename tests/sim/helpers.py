"""Hand-made traces for the simulator tests, and where the shared reference data lives."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spotfleet.sim.traces import TraceFile, TraceSet

REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = Path(os.environ.get("SPOTFLEET_SHARED_TRACES", REPO.parent / "shared" / "data" / "traces"))
"""The reference traces: ``../shared/data/traces`` next to the checkout, or wherever
``SPOTFLEET_SHARED_TRACES`` points (a clone elsewhere, e.g. CI's in /tmp)."""

MakeSet = Callable[..., TraceSet]


def trace_file(
    zone: str,
    available: Sequence[int],
    *,
    spot: float | Sequence[float] | None = 1.0,
    on_demand: float = 3.0,
    tick: float = 1800,
    region: str | None = None,
    start: str | None = None,
    requested: int | None = None,
    cloud: str = "aws",
    instance_type: str = "p3.2xlarge",
) -> TraceFile:
    data: dict[str, Any] = {
        "name": f"test-{zone}",
        "kind": "availability",
        "cloud": cloud,
        "region": region or zone[:-1],
        "zone": zone,
        "instance_type": instance_type,
        "gpu": "V100",
        "gpus_per_instance": 1,
        "start_time": start,
        "tick_seconds": tick,
        "on_demand_price": on_demand,
        "spot_price": list(spot) if isinstance(spot, Sequence) else spot,
        "requested": requested if requested is not None else max(1, *available),
        "available": list(available),
    }
    return TraceFile.model_validate(data)
