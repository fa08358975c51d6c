"""Hand-made traces for the simulator tests, and where the shared reference data lives."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from spotfleet.sim.traces import TraceFile, TraceSet

REPO = Path(__file__).resolve().parents[2]


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (the benchmarks are scripts, not a package).
    Registered in ``sys.modules`` under ``name``: dataclasses resolve their
    annotations through their module's entry there."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _shared_traces() -> Path:
    """``SPOTFLEET_SHARED_TRACES`` when set; else ``../shared/data/traces`` next to
    this checkout, or next to the checkout it was cloned from when that is a local
    path (CI's fresh clone in /tmp: ``git clone -q . /tmp/ci-check``)."""
    if os.environ.get("SPOTFLEET_SHARED_TRACES"):
        return Path(os.environ["SPOTFLEET_SHARED_TRACES"])
    beside = REPO.parent / "shared" / "data" / "traces"
    if beside.is_dir():
        return beside
    origin = subprocess.run(["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
                            capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    if origin and "://" not in origin and Path(origin).is_dir():
        cloned_from = Path(origin).resolve().parent / "shared" / "data" / "traces"
        if cloned_from.is_dir():
            return cloned_from
    return beside


SHARED_TRACES = _shared_traces()
"""The reference traces (``_shared_traces``); the tests that read them skip, naming
the path, when none is found."""

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
