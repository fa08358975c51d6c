"""Spot traces: per-zone availability and price series, loaded and validated.

The schema is the reference data's (``shared/data/README.md``): one JSON file
per zone with ``available`` (instances obtainable at each tick, 0..requested),
``spot_price`` (a number, a per-tick list, or null) and ``on_demand_price``.

Design choice: every trace of a set is resampled once, at load time, onto one
common grid (the finest ``tick_seconds`` of the set, starting at the earliest
``start_time``), so the simulator, the sim provider and the omniscient optimum
all read the same ``(zone, tick)`` matrix and never disagree about what was
available when. Beyond the end of a zone's own trace, its spot capacity is 0.

A null spot price is filled, in order, from the bundled catalog (same instance
type and zone, then the median over the same region) and otherwise from a ratio
to on-demand (default 0.3, the discount of the Can't Be Late V100 traces). Each
trace records where its price came from (``spot_price_source``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spotfleet.errors import InvalidSpec
from spotfleet.model.offering import Market, Offerings
from spotfleet.model.snapshot import spot_pool_key

DEFAULT_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DEFAULT_SPOT_RATIO = 0.3

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class InvalidTrace(InvalidSpec):
    """A trace file (or a set of them) is malformed; names the file and field."""


class TraceFile(BaseModel):
    """One zone's trace as stored on disk (the reference data schema)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    source: str = ""
    kind: Literal["availability", "preemption"]
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpus_per_instance: int = Field(ge=1)
    start_time: datetime | None = None
    tick_seconds: float = Field(gt=0)
    on_demand_price: float = Field(gt=0)
    spot_price: float | list[float] | None = None
    requested: int = Field(ge=1)
    available: list[int] = Field(min_length=1)

    @field_validator("start_time")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("start_time must carry a timezone (ISO-8601 UTC)")
        return value.astimezone(UTC)

    @field_validator("spot_price")
    @classmethod
    def _non_negative_price(cls, value: float | list[float] | None) -> float | list[float] | None:
        prices = value if isinstance(value, list) else [] if value is None else [value]
        for i, price in enumerate(prices):
            if not price >= 0 or math.isinf(price):
                raise ValueError(f"spot price must be a finite number >= 0 (tick {i}: {price!r})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TraceFile:
        for i, count in enumerate(self.available):
            if not 0 <= count <= self.requested:
                raise ValueError(f"available[{i}] = {count} is outside 0..requested ({self.requested})")
        if isinstance(self.spot_price, list) and len(self.spot_price) != len(self.available):
            raise ValueError(f"spot_price has {len(self.spot_price)} ticks but available has {len(self.available)}")
        return self


@dataclass(frozen=True, slots=True)
class ZoneTrace:
    """One zone's series on the set's common grid (see ``TraceSet``)."""

    name: str
    source: str
    kind: str
    cloud: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpus_per_instance: int
    requested: int
    on_demand_price: float
    spot_price_source: str  # trace | catalog-zone | catalog-region | ratio
    available: IntArray  # per common tick
    spot_price: FloatArray  # per common tick, USD per instance-hour

    @property
    def key(self) -> str:
        """Unique within a set: cloud, instance type and zone."""
        return f"{self.cloud}:{self.instance_type}:{self.zone}"

    @property
    def availability_share(self) -> float:
        return float(np.mean(self.available > 0))


@dataclass(frozen=True, slots=True)
class TraceSet:
    """Several zones' traces on one grid: tick ``k`` covers
    ``[epoch + k·tick_seconds, epoch + (k+1)·tick_seconds)``."""

    zones: tuple[ZoneTrace, ...]
    epoch: datetime
    tick_seconds: float

    @property
    def n_ticks(self) -> int:
        return int(self.zones[0].available.shape[0])

    @property
    def end(self) -> datetime:
        return self.time_of(self.n_ticks)

    def keys(self) -> list[str]:
        return [z.key for z in self.zones]

    def zone(self, key: str) -> ZoneTrace:
        for trace in self.zones:
            if trace.key == key or trace.zone == key:
                return trace
        raise KeyError(f"no trace for {key!r}; have {', '.join(self.keys())}")

    def instance_types(self) -> list[str]:
        return sorted({z.instance_type for z in self.zones})

    def only(self, *, instance_type: str | None = None, zones: Iterable[str] = ()) -> TraceSet:
        """The subset of one instance type and/or some zones (names or keys)."""
        wanted = set(zones)
        picked = tuple(
            z
            for z in self.zones
            if (instance_type is None or z.instance_type == instance_type)
            and (not wanted or z.zone in wanted or z.key in wanted)
        )
        if not picked:
            raise InvalidTrace("zones", "no trace matches that selection")
        return TraceSet(picked, self.epoch, self.tick_seconds)

    # ------------------------------------------------------------ time <-> tick

    def tick_at(self, when: datetime) -> int:
        """The tick covering ``when`` (may be < 0 or ≥ n_ticks: outside the traces)."""
        return math.floor((when - self.epoch).total_seconds() / self.tick_seconds + 1e-9)

    def time_of(self, tick: int | float) -> datetime:
        return self.epoch + timedelta(seconds=float(tick) * self.tick_seconds)

    # ------------------------------------------------------------ queries

    def available_at(self, key: str, when: datetime) -> int:
        """Spot instances obtainable in the zone at ``when`` (0 outside the traces)."""
        tick = self.tick_at(when)
        trace = self.zone(key)
        if not 0 <= tick < self.n_ticks:
            return 0
        return int(trace.available[tick])

    def spot_price_at(self, key: str, when: datetime) -> float:
        """USD per instance-hour; the nearest tick's price outside the traces."""
        trace = self.zone(key)
        tick = min(max(self.tick_at(when), 0), self.n_ticks - 1)
        return float(trace.spot_price[tick])

    def on_demand_price(self, key: str) -> float:
        return self.zone(key).on_demand_price


# ---------------------------------------------------------------- loading


def read_trace_file(path: Path) -> TraceFile:
    """Parse and validate one file; ``InvalidTrace`` names the file and field."""
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidTrace("", f"cannot read trace: {exc}", source=str(path)) from None
    if not isinstance(data, dict):
        raise InvalidTrace("", "a trace file must hold one JSON object", source=str(path))
    try:
        return TraceFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", "invalid"))
        if first.get("type") == "missing":
            msg = "required field is missing"
        raise InvalidTrace(loc, msg.removeprefix("Value error, "), source=str(path)) from None


def trace_paths(paths: Iterable[Path | str]) -> list[Path]:
    """Every ``*.json`` of each directory (sorted), and each file named directly."""
    found: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            files = sorted(path.glob("*.json"))
            if not files:
                raise InvalidTrace("", "no *.json trace files in this directory", source=str(path))
            found.extend(files)
        elif path.is_file():
            found.append(path)
        else:
            raise InvalidTrace("", "no such file or directory", source=str(path))
    return found


@dataclass(frozen=True, slots=True)
class SpotLosses:
    """How often spot was lost in some traces: available → unavailable steps
    over available hours (a zone is available while at least one instance can
    be had, as the simulator reads it). ``rate`` is losses per available hour,
    the unit of a hazard prior (``policies/forecast.py``)."""

    losses: int
    available_hours: float

    @property
    def rate(self) -> float:
        return self.losses / self.available_hours if self.available_hours > 0 else 0.0


def up_runs(available: Iterable[int], tick_hours: float) -> list[float]:
    """Lengths (hours) of the up runs of one zone's series that ended inside it,
    in order: each is a spot loss (a run still up at the end is cut off, not
    counted). Up = at least one instance can be had, as the simulator reads it."""
    runs: list[float] = []
    length = 0
    for count in available:
        if count > 0:
            length += 1
        elif length:
            runs.append(length * tick_hours)
            length = 0
    return runs


def spot_losses(paths: Iterable[Path | str]) -> SpotLosses:
    """``SpotLosses`` summed over the trace files under ``paths``, each read
    on its own ticks (no common grid: a padded edge is not a loss)."""
    losses, hours = 0, 0.0
    for path in trace_paths(paths):
        tf = read_trace_file(path)
        losses += len(up_runs(tf.available, tf.tick_seconds / 3600.0))
        hours += sum(1 for count in tf.available if count > 0) * tf.tick_seconds / 3600.0
    return SpotLosses(losses, hours)


def cloud_of(paths: Iterable[Path | str]) -> set[str]:
    """The clouds the trace files under ``paths`` were measured on."""
    return {read_trace_file(path).cloud for path in trace_paths(paths)}


def load_traces(
    paths: Iterable[Path | str],
    *,
    catalog: Offerings | None = None,
    spot_ratio: float = DEFAULT_SPOT_RATIO,
    align: Literal["time", "start"] = "time",
) -> TraceSet:
    """Load trace directories/files into one ``TraceSet``.

    ``align="time"`` places each trace at its ``start_time`` (null: the set's
    epoch); ``align="start"`` lays every trace from tick 0 (to compare traces
    recorded at different times). ``catalog`` fills null spot prices (default:
    the bundled catalog, loaded only when needed).
    """
    files = trace_paths(paths)
    if not files:
        raise InvalidTrace("", "no trace files given")
    raw = [(path, read_trace_file(path)) for path in files]
    return build_trace_set(raw, catalog=catalog, spot_ratio=spot_ratio, align=align)


def build_trace_set(
    raw: Sequence[tuple[Path | str, TraceFile]],
    *,
    catalog: Offerings | None = None,
    spot_ratio: float = DEFAULT_SPOT_RATIO,
    align: Literal["time", "start"] = "time",
) -> TraceSet:
    """Align already-parsed traces on a common grid (see the module docstring)."""
    if not raw:
        raise InvalidTrace("", "no traces")
    seen: dict[str, str] = {}
    for path, tf in raw:
        key = f"{tf.cloud}:{tf.instance_type}:{tf.zone}"
        if key in seen:
            raise InvalidTrace(
                "zone",
                f"two traces for {key} ({seen[key]} and {path}); load them as separate sets",
                source=str(path),
            )
        seen[key] = str(path)
    tick = min(tf.tick_seconds for _, tf in raw)
    starts = [tf.start_time for _, tf in raw if tf.start_time is not None]
    epoch = min(starts) if starts else DEFAULT_EPOCH

    def offset(tf: TraceFile) -> float:
        if align == "start" or tf.start_time is None:
            return 0.0
        return (tf.start_time - epoch).total_seconds()

    n_ticks = max(math.ceil((offset(tf) + len(tf.available) * tf.tick_seconds) / tick - 1e-9) for _, tf in raw)
    longest = max(math.ceil(len(tf.available) * tf.tick_seconds / tick) for _, tf in raw)
    if n_ticks > 4 * longest:
        raise InvalidTrace(
            "start_time",
            "these traces were recorded far apart in time; load them with align='start'",
        )
    zones = []
    for path, tf in raw:
        index = _resample_index(tf, offset=offset(tf), tick=tick, n_ticks=n_ticks)
        inside = (index >= 0) & (index < len(tf.available))
        clipped = np.clip(index, 0, len(tf.available) - 1)
        available = np.where(inside, np.asarray(tf.available, dtype=np.int64)[clipped], 0).astype(np.int64)
        prices, source = _spot_series(tf, catalog=catalog, spot_ratio=spot_ratio, path=path)
        zones.append(
            ZoneTrace(
                name=tf.name,
                source=tf.source,
                kind=tf.kind,
                cloud=tf.cloud,
                region=tf.region,
                zone=tf.zone,
                instance_type=tf.instance_type,
                gpu=tf.gpu,
                gpus_per_instance=tf.gpus_per_instance,
                requested=tf.requested,
                on_demand_price=tf.on_demand_price,
                spot_price_source=source,
                available=available,
                spot_price=prices[clipped].astype(np.float64),
            )
        )
    return TraceSet(tuple(zones), epoch, tick)


def _resample_index(tf: TraceFile, *, offset: float, tick: float, n_ticks: int) -> IntArray:
    """For each common tick, the index of the trace's own tick covering its start."""
    starts = np.arange(n_ticks, dtype=np.float64) * tick - offset
    return np.floor(starts / tf.tick_seconds + 1e-9).astype(np.int64)


def _spot_series(
    tf: TraceFile, *, catalog: Offerings | None, spot_ratio: float, path: Path | str
) -> tuple[FloatArray, str]:
    n = len(tf.available)
    if isinstance(tf.spot_price, list):
        return np.asarray(tf.spot_price, dtype=np.float64), "trace"
    if tf.spot_price is not None:
        return np.full(n, float(tf.spot_price)), "trace"
    price, source = catalog_spot_price(tf, catalog=catalog, spot_ratio=spot_ratio)
    return np.full(n, price), source


_BUNDLED: Offerings | None = None


def _bundled_catalog() -> Offerings:
    global _BUNDLED
    if _BUNDLED is None:
        from spotfleet.catalog import load_catalog

        _BUNDLED = load_catalog()
    return _BUNDLED


def catalog_spot_price(
    tf: TraceFile, *, catalog: Offerings | None = None, spot_ratio: float = DEFAULT_SPOT_RATIO
) -> tuple[float, str]:
    """A spot price for a trace that has none, and where it came from."""
    offerings = (catalog if catalog is not None else _bundled_catalog()).where(
        lambda o: o.market is Market.SPOT and o.provider == tf.cloud and o.instance_type == tf.instance_type
    )
    exact = [o.price_per_hour for o in offerings if o.zone == tf.zone]
    if exact:
        return float(statistics.median(exact)), "catalog-zone"
    regional = [o.price_per_hour for o in offerings if o.region == tf.region]
    if regional:
        return float(statistics.median(regional)), "catalog-region"
    return spot_ratio * tf.on_demand_price, "ratio"


def availability_history(
    traces: TraceSet, *, first_tick: int, end_tick: int
) -> Iterator[tuple[datetime, dict[str, bool]]]:
    """The traces' spot availability as the controller would have observed it
    over ticks ``[first_tick, end_tick)``: ``(time, {pool key: up})`` at the
    first tick and at every tick where some zone changes (what
    ``controller.availability.AvailabilityLog.replay`` reads). Pool keys are
    ``Offering.key`` with the trace's cloud as the provider, as the simulator
    names them."""
    first, end = max(0, first_tick), min(end_tick, traces.n_ticks)
    if first >= end:
        return
    keys = [spot_pool_key(z.cloud, z.instance_type, z.zone) for z in traces.zones]
    up = np.stack([z.available[first:end] > 0 for z in traces.zones])
    changed = np.flatnonzero((np.diff(up, axis=1) != 0).any(axis=0)) + 1
    for offset in (0, *changed.tolist()):
        yield traces.time_of(first + offset), {k: bool(u) for k, u in zip(keys, up[:, offset], strict=True)}
