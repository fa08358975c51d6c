"""Convert public spot traces into the simulator's trace files (one ``<zone>.json`` per zone).

The simulator reads its own schema (docs/simulator.md, "Trace files"; the
loader is ``spotfleet/sim/traces.py``), and the reference sets under
``../shared/data/traces`` were converted into it by hand. This tool does that
conversion repeatably, for the two public trace formats those sets come from,
so a new trace (another date, zone or GPU of the same repositories) can be
added without re-deriving the conventions, and a converted set can be checked
against its source:

- ``spot-traces``: github.com/skypilot-org/spot-traces, the traces of "Can't Be
  Late: Optimizing Spot Instance Savings under Deadlines" (NSDI 2024). A file
  ``<zone>_<gpu>_<n>.json`` (under ``availability/<k>-node/aws-<date>/`` or
  ``preemption/<k>-node/aws-<date>/``) holds ``{"metadata": {"gap_seconds":
  195}, "data": [0, 1, 1, ...]}``: each tick, how many instances were obtained
  (availability) or alive (preemption). **1 = available**, as in the
  simulator (the 16-node traces count up to 16), so ``data`` is copied as is.
  The file says nothing else: the instance type, GPU and on-demand price come
  from the command line, the zone from the file name (the region is the zone
  without its last letter on AWS, without its ``-x`` suffix on GCP), the kind
  from a path component named ``availability`` or ``preemption`` (or
  ``--kind``). The spot price is ``--spot-price`` (constant), ``--spot-prices
  FILE`` (a JSON object mapping each file's stem, e.g. ``us-east-1a_v100_1``,
  to one price per tick: the shape of the SkyNomad artifact's
  ``data/v100_spot_prices.json``), else the file's own ``prices`` list (a few
  preemption files have one), else null (the simulator fills it from its
  catalog).
- ``skynomad``: github.com/andylizf/skynomad-artifact (Apache-2.0), its
  converted traces ``<zone>_<device>/full.json`` (e.g. in
  ``converted_multi_region_aligned_h100_16_merged``), with ``metadata``
  (``gap_seconds``, ``start_time``, ``zone``, ``price_info`` with the machine
  type, spot and on-demand prices) and per-tick ``prices``. **Its ``data`` is
  in the preempted convention: 1 = preempted / unavailable, 0 = available**
  (the artifact's ``TraceEnv.spot_available()`` returns ``not trace[tick]``),
  the inverse of the raw probes and of the simulator. It is inverted here
  (``available = 1 - x``); read as a spot-traces file it would swap every up
  and down tick without any error, which is why the format is detected from
  the file (``metadata.price_info``, or the name ``full.json``) and a skynomad
  file holding anything but 0/1 is refused. The numbered window files next to
  ``full.json`` (``0.json``, ``11.json``, ...) are slices of it and are skipped.

Both command lines (the first reproduces ``aws-v100-2023-02/us-east-1a.json``
of the reference data, the second ``gcp-h100-2025-10``):

    python -m bench.import_traces --out /tmp/v100 --instance-type p3.2xlarge --gpu V100 \\
        --on-demand-price 3.06 --spot-prices v100_spot_prices.json --start-time 2023-02-15T22:08:16+00:00 \\
        spot-traces/availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json
    python bench/import_traces.py --out /tmp/h100 --gpu H100 converted_multi_region_aligned_h100_16_merged

An input is a file or a directory (its ``full.json``, its ``<zone>_*/full.json``,
else its ``*.json``). Nothing is written unless every input converts, and an
existing ``<zone>.json`` is kept unless ``--force``. Each file written is read
back with ``spotfleet.sim.traces.read_trace_file``. Prints one line per file
(zone, ticks, availability share, spot price range), then one JSON line
``{"files": N, "out": DIR}``. Bad input exits 2 with one line naming the file,
the field and the fix.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from spotfleet.sim.traces import InvalidTrace, TraceFile, read_trace_file

FORMATS = ("spot-traces", "skynomad")
KINDS = ("availability", "preemption")
PRICE_DECIMALS = 5
SPOT_TRACES = "skypilot-org/spot-traces"
SKYNOMAD = "andylizf/skynomad-artifact"

_WINDOW = re.compile(r"^\d+\.json$")  # the skynomad artifact's window slices of full.json
_AWS_ZONE = re.compile(r"^[a-z]{2}(?:-[a-z]+)+-\d+[a-z]$")  # us-east-1d, ap-northeast-1a, us-gov-west-1a
_GCP_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")  # us-central1-a, asia-southeast1-b
_ZONE_EXAMPLE = {"aws": "us-east-1d", "gcp": "us-central1-a"}

Price = float | list[float] | None


@dataclass(frozen=True, slots=True)
class Options:
    """The command line's trace facts; None where not given (each format has its defaults)."""

    fmt: str | None = None  # None: detect per file
    cloud: str | None = None
    instance_type: str | None = None
    gpu: str | None = None
    gpus_per_instance: int | None = None
    on_demand_price: float | None = None
    kind: str | None = None
    requested: int | None = None
    start_time: datetime | None = None
    tick_seconds: float | None = None
    spot_price: float | None = None
    spot_prices: Path | None = None
    name_suffix: str = ""


@dataclass(frozen=True, slots=True)
class Converted:
    """One input converted: the trace record (the schema's fields, in order) and where it came from."""

    input: Path
    fmt: str
    record: dict[str, Any]

    @property
    def zone(self) -> str:
        return str(self.record["zone"])


# ---------------------------------------------------------------- small readers


def _fail(source: Path | str, field: str, message: str) -> NoReturn:
    raise InvalidTrace(field, message, source=str(source))


def _number(value: object) -> float | None:
    """A finite JSON number as float, else None (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _plain(value: float) -> int | float:
    """195.0 -> 195: keep whole numbers whole in the output."""
    return int(value) if value == int(value) else value


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data: Any = json.loads(path.read_text())
    except OSError as exc:
        _fail(path, "", f"cannot read it ({exc.strerror}); check the path")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        _fail(path, "", f"not JSON ({exc}); pass a spot-traces file or a skynomad full.json")
    if not isinstance(data, dict):
        _fail(path, "", f"holds a JSON {type(data).__name__}, not an object; pass a spot-traces or skynomad trace")
    return data


def _counts(path: Path, raw: dict[str, Any], hint: str) -> list[int]:
    """``data`` as whole numbers; ``hint`` says what the file should look like."""
    if "data" not in raw:
        _fail(path, "data", f"missing: no per-tick series in this file; {hint}")
    values = raw["data"]
    if not isinstance(values, list):
        _fail(path, "data", f"is a {type(values).__name__}, not a list of per-tick counts; {hint}")
    if not values:
        _fail(path, "data", f"is empty: no ticks to import; {hint}")
    counts = []
    for i, value in enumerate(values):
        number = _number(value)
        if number is None or number != int(number):
            _fail(path, f"data[{i}]", f"{value!r} is not a whole number of instances; fix or drop that tick")
        counts.append(int(number))
    return counts


def _price_list(source: Path, field: str, values: object, n_ticks: int, fix: str) -> list[float]:
    if not isinstance(values, list):
        _fail(source, field, f"is a {type(values).__name__}, not a list of per-tick USD prices; {fix}")
    if len(values) != n_ticks:
        _fail(source, field, f"has {len(values)} prices but data has {n_ticks} ticks; give one price per tick ({fix})")
    prices = []
    for i, value in enumerate(values):
        number = _number(value)
        if number is None or number < 0:
            _fail(source, f"{field}[{i}]", f"{value!r} is not a price (a finite number >= 0 USD/h); {fix}")
        prices.append(round(number, PRICE_DECIMALS))
    return prices


def _collapse(prices: list[float]) -> Price:
    """A series that never changes is stored as its constant."""
    return prices[0] if len(set(prices)) == 1 else prices


def _tick_seconds(path: Path, metadata: dict[str, Any], opts: Options) -> float:
    if opts.tick_seconds is not None:
        return opts.tick_seconds
    if "gap_seconds" not in metadata:
        _fail(
            path,
            "metadata.gap_seconds",
            "missing: the file does not say the seconds between ticks; pass --tick-seconds",
        )
    gap = _number(metadata["gap_seconds"])
    if gap is None or gap <= 0:
        _fail(path, "metadata.gap_seconds", f"{metadata['gap_seconds']!r} is not a number > 0; pass --tick-seconds")
    return gap


def _region(path: Path, zone: str, cloud: str) -> str:
    """``us-east-1d`` -> ``us-east-1`` (AWS), ``us-central1-a`` -> ``us-central1`` (GCP)."""
    if cloud == "aws" and _AWS_ZONE.match(zone):
        return zone[:-1]
    if cloud == "gcp" and _GCP_ZONE.match(zone):
        return zone.rsplit("-", 1)[0]
    other = "gcp" if cloud == "aws" else "aws"
    looks = _GCP_ZONE if other == "gcp" else _AWS_ZONE
    if looks.match(zone):
        _fail(path, "zone", f"{zone!r} names a zone of {other}, not of {cloud}; pass --cloud {other}")
    _fail(path, "zone", f"{zone!r} is not a zone name of {cloud} (like {_ZONE_EXAMPLE[cloud]}); "
                        "name the file <zone>_<gpu>_<n>.json or check --cloud")  # fmt: skip


def _from_component(path: Path, names: Sequence[str]) -> tuple[str, str] | None:
    """The deepest directory of ``path`` named one of ``names``, and the path from it on."""
    parts = path.absolute().parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in names:
            return parts[i], "/".join(parts[i:])
    return None


def _price_table(path: Path) -> dict[str, Any]:
    """The ``--spot-prices`` file: ``{"<file stem>": [USD per tick, ...], ...}``."""
    table = _read_json(path)
    if not table:
        _fail(path, "--spot-prices", "is an empty object; map each trace file's stem to its per-tick prices")
    return table


def _given_spot_price(
    source: Path, stem: str, opts: Options, table: dict[str, Any] | None, raw: dict[str, Any], n_ticks: int, hint: str
) -> tuple[Price, str] | None:
    """The spot price the command line or the file itself gives, in that order
    (``--spot-price``, ``--spot-prices``, the file's ``prices`` list), with a
    note on where it came from; None when neither gives one."""
    if opts.spot_price is not None:
        return round(opts.spot_price, PRICE_DECIMALS), "constant spot price (--spot-price)"
    if table is not None:
        return _from_table(source, stem, opts, table, n_ticks)
    if "prices" in raw:
        spot = _collapse(_price_list(source, "prices", raw["prices"], n_ticks, hint))
        kind = "per-tick spot prices" if isinstance(spot, list) else "constant spot price"
        return spot, f"{kind} from the file's own prices list"
    return None


def _from_table(source: Path, stem: str, opts: Options, table: dict[str, Any], n_ticks: int) -> tuple[Price, str]:
    assert opts.spot_prices is not None
    if stem not in table:
        have = ", ".join(sorted(table)[:6]) + (", ..." if len(table) > 6 else "")
        _fail(source, "--spot-prices", f"{opts.spot_prices} has no entry {stem!r} (it has {have}); "
                                       "add one, or give --spot-price for a constant price")  # fmt: skip
    prices = _price_list(source, f"--spot-prices[{stem!r}]", table[stem], n_ticks, f"fix {opts.spot_prices}")
    return _collapse(prices), f"per-tick spot prices from {opts.spot_prices.name}[{stem}]"


def _start_time(path: Path, metadata: dict[str, Any], opts: Options) -> datetime | None:
    if opts.start_time is not None:
        return opts.start_time
    value = metadata.get("start_time")
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        _fail(path, "metadata.start_time", f"{value!r} is not ISO-8601; pass --start-time")
    if when.tzinfo is None:
        _fail(path, "metadata.start_time", f"{value!r} has no timezone; pass --start-time with one (e.g. ...+00:00)")
    return when


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).isoformat()


# ---------------------------------------------------------------- the two formats


def detect_format(path: Path, raw: dict[str, Any]) -> str:
    """``skynomad`` (``metadata.price_info``, or a ``full.json``), ``spot-traces``
    (a ``metadata`` object without it), else ``InvalidTrace``."""
    if "available" in raw and "tick_seconds" in raw:
        _fail(path, "", "already a spotfleet trace file (it has 'available'); load it as is, nothing to import")
    metadata = raw.get("metadata")
    if (isinstance(metadata, dict) and isinstance(metadata.get("price_info"), dict)) or path.name == "full.json":
        return "skynomad"
    if isinstance(metadata, dict):
        return "spot-traces"
    _fail(path, "metadata", "unknown format: neither a spot-traces file ({metadata: {gap_seconds}, data}) nor a "
                            "skynomad full.json (metadata.price_info); pass --format if it is one of them")  # fmt: skip


def convert_spot_traces(path: Path, raw: dict[str, Any], opts: Options, table: dict[str, Any] | None) -> dict[str, Any]:
    """A skypilot-org/spot-traces file: ``data`` counts instances obtained, 1 = available."""
    for flag, value, example in (("--instance-type", opts.instance_type, "p3.2xlarge"), ("--gpu", opts.gpu, "V100"),
                                 ("--on-demand-price", opts.on_demand_price, "3.06")):  # fmt: skip
        if value is None:
            _fail(path, flag, f"required for a spot-traces file (it records only ticks); pass e.g. {flag} {example}")
    assert opts.instance_type is not None and opts.gpu is not None and opts.on_demand_price is not None
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, dict):
        _fail(path, "metadata", f"is a {type(metadata).__name__}, not an object with gap_seconds; fix the file")
    if "price_info" in metadata or path.name == "full.json":
        # read as counts, a skynomad trace would swap every up and down tick
        _fail(path, "metadata.price_info", "this is a skynomad trace (data inverted: 1 = unavailable), not a "
                                           "spot-traces file; drop --format spot-traces")  # fmt: skip
    hint = 'a spot-traces file is {"metadata": {"gap_seconds": ...}, "data": [...]}'
    data = _counts(path, raw, hint)
    for i, count in enumerate(data):
        if count < 0:
            _fail(path, f"data[{i}]", f"{count} instances is negative; a count per tick is >= 0 (fix the file)")
    requested = opts.requested if opts.requested is not None else max(1, *data)
    for i, count in enumerate(data):
        if count > requested:
            _fail(path, f"data[{i}]", f"{count} instances, more than --requested {requested}; "
                                      f"pass --requested {max(data)} or more")  # fmt: skip
    stem = path.stem
    zone = stem.split("_", 1)[0]
    cloud = opts.cloud or "aws"
    region = _region(path, zone, cloud)
    found = _from_component(path, KINDS)
    kind = opts.kind or (found[0] if found else None)
    if kind is None:
        _fail(path, "--kind", "cannot tell availability from preemption (no directory of the path is named "
                              "'availability' or 'preemption'); pass --kind availability or --kind preemption")  # fmt: skip
    tick = _tick_seconds(path, metadata, opts)
    given = _given_spot_price(path, stem, opts, table, raw, len(data), "or pass --spot-price / --spot-prices")
    spot, spot_note = given or (None, "spot price unknown (null: the simulator's catalog fills it)")
    cited = found[1] if found else str(path)
    return _record(
        name=f"{cloud}-{opts.instance_type}-{zone}{opts.name_suffix}",
        source=f"{SPOT_TRACES} {cited} (Can't Be Late, NSDI'24; data = instances obtained per tick, "
        f"1 = available); {spot_note}; on-demand price of {opts.instance_type} from --on-demand-price",
        kind=kind, cloud=cloud, region=region, zone=zone, instance_type=opts.instance_type, gpu=opts.gpu,
        gpus_per_instance=opts.gpus_per_instance or 1, start_time=_iso(opts.start_time), tick=tick,
        on_demand=opts.on_demand_price, spot=spot, requested=requested, available=data,
    )  # fmt: skip


def convert_skynomad(path: Path, raw: dict[str, Any], opts: Options, table: dict[str, Any] | None) -> dict[str, Any]:
    """A skynomad-artifact ``full.json``: ``data`` is in the preempted convention (1 = unavailable)."""
    metadata = raw.get("metadata")
    if not isinstance(metadata, dict):
        _fail(path, "metadata", "missing or not an object: a skynomad trace carries metadata.gap_seconds and "
                                "metadata.price_info; pass --format spot-traces if this is a spot-traces file")  # fmt: skip
    info = metadata.get("price_info", {})
    if not isinstance(info, dict):
        _fail(path, "metadata.price_info", f"is a {type(info).__name__}, not an object; fix the file")
    if opts.gpu is None:
        _fail(
            path, "--gpu", "required for a skynomad trace (the artifact names machine types only); pass e.g. --gpu H100"
        )
    if opts.requested is not None:
        _fail(path, "--requested", "applies to spot-traces files only (a skynomad trace is 0/1 per tick); drop it")
    data = _counts(path, raw, "a skynomad trace is {metadata, data: [0/1 per tick], prices}")
    for i, flag in enumerate(data):
        if flag not in (0, 1):
            _fail(path, f"data[{i}]", f"{flag}: a skynomad trace holds 0 (available) or 1 (preempted) per tick; "
                                      "if this is a spot-traces count, pass --format spot-traces")  # fmt: skip
    available = [1 - flag for flag in data]  # preempted convention -> 1 = available
    stem = path.parent.name if path.name == "full.json" else path.stem
    zone = metadata.get("zone") or info.get("zone") or stem.split("_", 1)[0]
    if not isinstance(zone, str):
        _fail(path, "metadata.zone", f"{zone!r} is not a zone name; fix the file")
    cloud = opts.cloud or "gcp"
    region = _region(path, zone, cloud)  # checks the zone is the cloud's
    if isinstance(info.get("region"), str):
        region = info["region"]
    instance_type = opts.instance_type or info.get("machine_type") or info.get("instance_type")
    if not isinstance(instance_type, str) or not instance_type:
        _fail(path, "metadata.price_info.machine_type", "missing: the trace does not name its instance type; "
                                                        "pass --instance-type")  # fmt: skip
    gpus = opts.gpus_per_instance or _gpu_count(info)
    if gpus is None:
        _fail(path, "metadata.price_info.components", "has no gpu component with a quantity; pass --gpus-per-instance")
    on_demand = opts.on_demand_price
    if on_demand is None:
        on_demand = _number(info.get("on_demand_price"))
        if on_demand is None or on_demand <= 0:
            _fail(path, "metadata.price_info.on_demand_price", f"{info.get('on_demand_price')!r} is not a price > 0; "
                                                               "pass --on-demand-price")  # fmt: skip
    given = _given_spot_price(path, stem, opts, table, raw, len(data), "or pass --spot-price")
    spot: Price
    if given is not None:
        spot, spot_note = given
    elif _number(info.get("price")) is not None:
        spot, spot_note = round(float(info["price"]), PRICE_DECIMALS), "spot price from metadata.price_info.price"
    else:
        spot, spot_note = None, "spot price unknown (null: the simulator's catalog fills it)"
    cited = _cite_skynomad(path)
    filled = metadata.get("gap_filled")
    gap_note = ""
    if isinstance(filled, dict) and "gap_start_index" in filled and "gap_end_index" in filled:
        gap_note = (f"; ticks {filled['gap_start_index']}-{filled['gap_end_index']} were filled in by the artifact "
                    f"({filled.get('fill_strategy', 'gap fill')})")  # fmt: skip
    return _record(
        name=f"{cloud}-{instance_type}-{zone}{opts.name_suffix}",
        source=f"{SKYNOMAD} {cited} (Apache-2.0; data in the preempted convention, 1 = unavailable, inverted "
        f"here){gap_note}; {spot_note}",
        kind=opts.kind or "availability", cloud=cloud, region=region, zone=zone, instance_type=instance_type,
        gpu=opts.gpu, gpus_per_instance=gpus, start_time=_iso(_start_time(path, metadata, opts)),
        tick=_tick_seconds(path, metadata, opts), on_demand=round(on_demand, PRICE_DECIMALS), spot=spot,
        requested=1, available=available,
    )  # fmt: skip


def _gpu_count(info: dict[str, Any]) -> int | None:
    """GPUs per instance from the billing components (``label: gpu``, ``quantity: 8.0``)."""
    components = info.get("components")
    if not isinstance(components, list):
        return None
    for part in components:
        if isinstance(part, dict) and part.get("label") == "gpu":
            quantity = _number(part.get("quantity"))
            if quantity is not None and quantity >= 1 and quantity == int(quantity):
                return int(quantity)
    return None


def _cite_skynomad(path: Path) -> str:
    """The path from the artifact's ``converted_*`` directory on, else the path as given."""
    parts = path.absolute().parts
    for i in range(len(parts) - 1):
        if parts[i].startswith("converted"):
            return "/".join(parts[i:])
    return str(path)


def _record(*, name: str, source: str, kind: str, cloud: str, region: str, zone: str, instance_type: str,
            gpu: str, gpus_per_instance: int, start_time: str | None, tick: float, on_demand: float, spot: Price,
            requested: int, available: list[int]) -> dict[str, Any]:  # fmt: skip
    """The schema's fields in the documented order."""
    return {
        "name": name,
        "source": source,
        "kind": kind,
        "cloud": cloud,
        "region": region,
        "zone": zone,
        "instance_type": instance_type,
        "gpu": gpu,
        "gpus_per_instance": gpus_per_instance,
        "start_time": start_time,
        "tick_seconds": _plain(tick),
        "on_demand_price": _plain(on_demand),
        "spot_price": spot,
        "requested": requested,
        "available": available,
    }


CONVERTERS = {"spot-traces": convert_spot_traces, "skynomad": convert_skynomad}


# ---------------------------------------------------------------- inputs and outputs


def input_files(items: Sequence[str]) -> list[Path]:
    """Each file named; for a directory its ``full.json``, else its ``*/full.json``, else its
    ``*.json`` (numbered skynomad windows skipped), sorted."""
    files: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_file():
            if _WINDOW.match(path.name):
                _fail(path, "", "a numbered window (a slice of a skynomad full.json); pass full.json or its directory")
            files.append(path)
        elif path.is_dir():
            if (path / "full.json").is_file():
                files.append(path / "full.json")
                continue
            found = sorted(path.glob("*/full.json")) or sorted(
                p for p in path.glob("*.json") if not _WINDOW.match(p.name)
            )
            if not found:
                _fail(path, "", "no trace files here (full.json, <zone>_*/full.json or *.json); check the path")
            files.extend(found)
        else:
            _fail(path, "", "no such file or directory; check the path")
    unique: dict[Path, None] = {}
    for path in files:
        unique.setdefault(path, None)
    return list(unique)


def convert(path: Path, opts: Options, table: dict[str, Any] | None) -> Converted:
    """One input file to a validated trace record (``InvalidTrace`` names the input and field)."""
    raw = _read_json(path)
    fmt = opts.fmt or detect_format(path, raw)
    record = CONVERTERS[fmt](path, raw, opts, table)
    try:
        TraceFile.model_validate(record)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        _fail(path, loc, f"{str(first.get('msg', 'invalid')).removeprefix('Value error, ')} in the converted trace; "
                         "check the options that set it")  # fmt: skip
    return Converted(path, fmt, record)


def write_checked(item: Converted, target: Path) -> TraceFile:
    """Write ``target`` through a temporary file, read it back with the simulator's loader."""
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(item.record, separators=(",", ":"), ensure_ascii=False) + "\n")
    try:
        back = read_trace_file(tmp)
    except InvalidTrace as exc:
        tmp.unlink(missing_ok=True)
        _fail(item.input, exc.field, f"{exc.message} (the written trace did not read back)")
    if list(back.available) != item.record["available"]:
        tmp.unlink(missing_ok=True)
        _fail(item.input, "available", "the written trace read back different; report this as a bug")
    os.replace(tmp, target)
    return back


def summary(back: TraceFile, target: Path) -> str:
    n = len(back.available)
    share = sum(1 for count in back.available if count > 0) / n
    if back.spot_price is None:
        spot = "spot null (catalog)"
    else:
        prices = back.spot_price if isinstance(back.spot_price, list) else [back.spot_price]
        lo, hi = min(prices), max(prices)
        spot = f"spot ${lo:.4g}/h" if lo == hi else f"spot ${lo:.4g}-{hi:.4g}/h"
    return f"{back.zone}: {n} ticks x {back.tick_seconds:g} s, available {share:.1%}, {spot} -> {target}"


# ---------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, exit 2 (argparse's default prints the whole usage first)."""
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _positive(what: str) -> Any:
    def parse(text: str) -> float:
        number = _number(_float_or_none(text))
        if number is None or number <= 0:
            raise argparse.ArgumentTypeError(f"must be a number > 0 ({what}), not {text!r}")
        return number

    return parse


def _non_negative_price(text: str) -> float:
    number = _number(_float_or_none(text))
    if number is None or number < 0:
        raise argparse.ArgumentTypeError(f"must be a price >= 0 (USD per instance-hour), not {text!r}")
    return number


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value


def _when(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not ISO-8601 (e.g. 2023-02-15T22:08:16+00:00)") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no timezone; add one (e.g. 2023-02-15T22:08:16+00:00)")
    return when


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="import_traces", description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+", help="trace files or directories (spot-traces *.json, skynomad full.json)")
    p.add_argument("--out", required=True, type=Path, help="directory for the <zone>.json files (created if missing)")
    p.add_argument("--force", action="store_true", help="overwrite <zone>.json files that exist")
    p.add_argument("--format", dest="fmt", choices=FORMATS, help="the inputs' format (default: detect per file)")
    p.add_argument("--cloud", choices=("aws", "gcp"), help="default: aws for spot-traces, gcp for skynomad")
    p.add_argument("--instance-type", help="e.g. p3.2xlarge (required for spot-traces; skynomad: machine_type)")
    p.add_argument("--gpu", help="GPU model, e.g. V100, H100 (required)")
    p.add_argument("--gpus-per-instance", type=_count,
                   help="default: 1 for spot-traces; skynomad: the gpu billing component's quantity")  # fmt: skip
    p.add_argument("--on-demand-price", type=_positive("USD per instance-hour"),
                   help="USD/h (required for spot-traces; skynomad: price_info.on_demand_price)")  # fmt: skip
    p.add_argument("--kind", choices=KINDS, help="default: from a directory named availability/preemption")
    p.add_argument("--requested", type=_count, help="spot-traces: instances asked for per tick (default: max of data)")
    p.add_argument("--start-time", type=_when, help="ISO-8601 with a timezone (spot-traces default: null)")
    p.add_argument("--tick-seconds", type=_positive("seconds"), help="default: metadata.gap_seconds")
    prices = p.add_mutually_exclusive_group()
    prices.add_argument("--spot-price", type=_non_negative_price, help="constant spot price, USD/h")
    prices.add_argument("--spot-prices", type=Path, metavar="FILE",
                        help='JSON {"<file stem>": [USD per tick, ...]}, e.g. v100_spot_prices.json')  # fmt: skip
    p.add_argument(
        "--name-suffix",
        default="",
        help="appended to each name; write --name-suffix=-1node-preemption (it starts with -)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    opts = Options(
        fmt=args.fmt, cloud=args.cloud, instance_type=args.instance_type, gpu=args.gpu,
        gpus_per_instance=args.gpus_per_instance, on_demand_price=args.on_demand_price, kind=args.kind,
        requested=args.requested, start_time=args.start_time, tick_seconds=args.tick_seconds,
        spot_price=args.spot_price, spot_prices=args.spot_prices, name_suffix=args.name_suffix,
    )  # fmt: skip
    out: Path = args.out
    try:
        table = _price_table(opts.spot_prices) if opts.spot_prices is not None else None
        converted = [convert(path, opts, table) for path in input_files(args.inputs)]
        if out.exists() and not out.is_dir():
            _fail(out, "--out", "is a file, not a directory; choose a directory")
        seen: dict[str, Path] = {}
        for item in converted:
            if item.zone in seen:
                _fail(item.input, "zone", f"{item.zone} again (also from {seen[item.zone]}): both would be "
                                          f"{item.zone}.json; convert them into separate --out directories")  # fmt: skip
            seen[item.zone] = item.input
            target = out / f"{item.zone}.json"
            if target.exists() and not args.force:
                _fail(target, "--out", "exists; pass --force to overwrite it, or choose another --out")
        out.mkdir(parents=True, exist_ok=True)
        for item in converted:
            target = out / f"{item.zone}.json"
            print(summary(write_checked(item, target), target))
    except InvalidTrace as exc:
        print(str(exc).replace("\n", "; "), file=sys.stderr)
        return 2
    print(json.dumps({"files": len(converted), "out": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
