"""The What-if page: a ``spotfleet simulate --json`` result opened as a page.

The document is validated (pydantic; unknown keys are ignored so newer
simulators still open) and turned into two charts — market per zone over time
with the spot-available windows and reclaims, and cumulative cost against the
on-demand line — plus the summary and the jobs table. A bad upload is a 422
naming the field, as for a bad job spec.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spotfleet.errors import InvalidSpec
from spotfleet.model.spec import format_validation_error
from spotfleet.web.fmt import epoch_ms

MAX_BYTES = 32 * 1024 * 1024


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore")


class SimJob(_Doc):
    name: str
    arrival: datetime
    deadline: datetime | None = None
    finished_at: datetime | None = None
    state: str
    starts: int = 0
    interruptions: int = 0
    lost_hours: float = 0.0
    missed_deadline: bool = False


class SimInstance(_Doc):
    id: str
    zone: str
    instance_type: str
    market: str
    start: datetime
    end: datetime | None = None
    cost: float = 0.0
    reclaimed: bool = False


class CurvePoint(_Doc):
    at: datetime
    cost: float
    on_demand: float


class SimDoc(_Doc):
    policy: str
    start: datetime
    end: datetime
    cost: float
    on_demand_cost: float
    deadline_misses: int = 0
    unfinished: int = 0
    interruptions: int = 0
    spot_share: float = 0.0
    gpu_hours_paid: float | None = None
    gpu_hours_used: float | None = None
    jobs: list[SimJob]
    instances: list[SimInstance]
    curves: list[CurvePoint] = Field(default_factory=list)
    spot_available: dict[str, list[tuple[datetime, datetime]]] = Field(default_factory=dict)

    @property
    def saving(self) -> float:
        return 1 - self.cost / self.on_demand_cost if self.on_demand_cost else 0.0


def parse(raw: bytes, *, source: str = "upload") -> SimDoc:
    if len(raw) > MAX_BYTES:
        raise InvalidSpec("file", f"larger than {MAX_BYTES // 2**20} MiB", source=source)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidSpec("file", f"not JSON ({exc}); upload the file `spotfleet simulate --json FILE` wrote",
                          source=source) from None  # fmt: skip
    if isinstance(data, dict) and data.get("policy") == "optimal" and "schedule" in data:
        raise InvalidSpec("policy", "an optimal-policy result has no instance timeline; open a result of "
                          "on-demand, greedy, uniform-progress, ups or spotfleet", source=source)  # fmt: skip
    if not isinstance(data, dict):
        raise InvalidSpec("file", "a simulation result is a JSON object", source=source)
    try:
        return SimDoc.model_validate(data)
    except ValidationError as exc:
        err = format_validation_error(exc)
        raise InvalidSpec(err.field, err.message, source=source) from None


def charts(doc: SimDoc) -> dict[str, Any]:
    """Chart.js data for the zone timeline and the cost curves (times in ms)."""
    zones = sorted({i.zone for i in doc.instances} | set(doc.spot_available))
    bars = [
        {"row": i.zone, "start": epoch_ms(i.start), "end": epoch_ms(i.end or doc.end), "market": i.market,
         "text": f"{i.id} {i.instance_type} {i.market} ${i.cost:,.2f}" + (" (reclaimed)" if i.reclaimed else "")}
        for i in doc.instances
    ]  # fmt: skip
    available = [
        {"row": zone, "start": epoch_ms(a), "end": epoch_ms(b)}
        for zone, windows in doc.spot_available.items()
        for a, b in windows
    ]
    reclaims = [{"row": i.zone, "at": epoch_ms(i.end or doc.end), "kind": "reclaim", "text": f"{i.id} reclaimed"}
                for i in doc.instances if i.reclaimed]  # fmt: skip
    return {
        "timeline": {"rows": zones, "bars": bars, "available": available, "markers": reclaims,
                     "start": epoch_ms(doc.start), "end": epoch_ms(doc.end)},
        "curves": {"at": [epoch_ms(p.at) for p in doc.curves], "cost": [p.cost for p in doc.curves],
                   "on_demand": [p.on_demand for p in doc.curves], "policy": doc.policy},
    }  # fmt: skip
