"""Workload files for the fleet scenario (b), and the single deadline job of scenario (a).

A workload is YAML::

    start_tick: 144          # or start: 2025-10-05T00:00:00Z (default: the traces' first tick)
    restart: 0.2h            # non-productive time of every (re)start (default 0.2 h)
    jobs:
      - name: finetune       # every other key is a job spec field (see the job spec docs)
        arrival: 2h          # after the start
        work: 20h            # the work it really needs (default: expected_duration)
        deadline: 30h        # after its arrival (optional)
        count: 3             # copies: finetune-1, finetune-2, finetune-3
        resources: {gpus: 8, gpu_types: [H100]}
        checkpoint: {interval: 30m}

``expected_duration`` defaults to ``work`` (the user knows their job), ``command``
to ``train`` (nothing is executed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from spotfleet.errors import InvalidSpec
from spotfleet.model.durations import parse_duration
from spotfleet.model.spec import JobSpec, parse_spec
from spotfleet.sim.engine import WorkItem
from spotfleet.sim.traces import TraceSet

SIM_FIELDS = ("arrival", "work", "deadline", "count")


@dataclass(frozen=True, slots=True)
class Workload:
    items: tuple[WorkItem, ...]
    start: datetime
    restart_seconds: float

    def horizon(self) -> datetime:
        """When to stop a run whose jobs cannot all finish (e.g. spot-only work
        with no spot): twice the span of arrivals and deadlines/work, plus a day."""
        ends = [
            max(
                item.spec.deadline or item.arrival,
                item.arrival + timedelta(seconds=item.work_seconds),
            )
            for item in self.items
        ]
        return self.start + 2 * (max(ends) - self.start) + timedelta(days=1)


def load_workload(path: Path | str, traces: TraceSet) -> Workload:
    """Read a workload file; ``InvalidSpec`` names the file, the job and the field."""
    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidSpec("", f"cannot read workload: {exc}", source=source) from None
    return parse_workload(data, traces, source=source)


def parse_workload(data: Any, traces: TraceSet, *, source: str = "workload") -> Workload:
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list) or not data["jobs"]:
        raise InvalidSpec("jobs", "a workload is a mapping with a non-empty list of jobs", source=source)
    unknown = set(data) - {"start", "start_tick", "restart", "jobs"}
    if unknown:
        raise InvalidSpec(
            sorted(unknown)[0],
            "unknown field (use start, start_tick, restart, jobs)",
            source=source,
        )
    start = _start(data, traces, source=source)
    restart = _duration(data.get("restart", "0.2h"), "restart", source)
    items: list[WorkItem] = []
    for i, raw in enumerate(data["jobs"]):
        where = f"jobs[{i}]"
        if not isinstance(raw, dict):
            raise InvalidSpec(where, "each job is a mapping", source=source)
        fields = {k: v for k, v in raw.items() if k not in SIM_FIELDS}
        arrival = _duration(raw.get("arrival", 0), f"{where}.arrival", source)
        count = raw.get("count", 1)
        if not isinstance(count, int) or count < 1:
            raise InvalidSpec(f"{where}.count", "count must be a positive integer", source=source)
        fields.setdefault("command", "train")
        if "work" in raw:
            work = _duration(raw["work"], f"{where}.work", source)
        elif "expected_duration" in raw:
            work = _duration(raw["expected_duration"], f"{where}.expected_duration", source)
        else:
            raise InvalidSpec(f"{where}.work", "say how much work the job needs, e.g. work: 12h", source=source)
        fields.setdefault("expected_duration", work.total_seconds())
        arrives = start + arrival
        if raw.get("deadline") is not None:
            fields["deadline"] = (arrives + _duration(raw["deadline"], f"{where}.deadline", source)).isoformat()
        name = str(fields.get("name", f"job{i}"))
        for n in range(count):
            spec_fields = dict(fields, name=f"{name}-{n + 1}" if count > 1 else name)
            try:
                spec: JobSpec = parse_spec(spec_fields, source=source)
            except InvalidSpec as exc:
                raise InvalidSpec(f"{where}.{exc.field}" if exc.field else where, exc.message, source=source) from None
            items.append(WorkItem(spec=spec, arrival=arrives, work_seconds=work.total_seconds()))
    return Workload(tuple(items), start, restart.total_seconds())


def single_job(
    traces: TraceSet,
    *,
    work_hours: float,
    deadline_hours: float,
    start_tick: int,
    checkpoint_interval: timedelta | None = None,
    checkpoint_gb: float = 0.0,
    checkpoint_seconds: float | None = None,
) -> WorkItem:
    """Scenario (a): one job of ``work_hours`` on one instance of the traces' type,
    due ``deadline_hours`` after ``start_tick``; its spec declares the checkpoint
    size the simulator charges egress for, so policies can price a move, and
    how long its checkpoint takes (``checkpoint_seconds``, the simulator's
    ``SimSettings.checkpoint_seconds``), so they can tell whether it fits a notice."""
    checkpoint: dict[str, float] = {"size_gib": checkpoint_gb} if checkpoint_gb else {}
    if checkpoint_seconds is not None:
        checkpoint["duration"] = checkpoint_seconds
    if checkpoint_interval:
        checkpoint["interval"] = checkpoint_interval.total_seconds()
    types = traces.instance_types()
    if len(types) != 1:
        raise InvalidSpec("traces", f"scenario (a) needs traces of one instance type, got {types}")
    zone = traces.zones[0]
    start = traces.time_of(start_tick)
    spec = parse_spec(
        {
            "name": "deadline-job",
            "command": "train",
            "resources": {"gpus": zone.gpus_per_instance, "gpu_types": [zone.gpu]},
            "deadline": (start + timedelta(hours=deadline_hours)).isoformat(),
            "expected_duration": work_hours * 3600,
            "checkpoint": checkpoint,
        }
    )
    return WorkItem(spec=spec, arrival=start, work_seconds=work_hours * 3600)


def _start(data: dict[str, Any], traces: TraceSet, *, source: str) -> datetime:
    if "start" in data and "start_tick" in data:
        raise InvalidSpec("start", "give start or start_tick, not both", source=source)
    if "start_tick" in data:
        tick = data["start_tick"]
        if not isinstance(tick, int) or not 0 <= tick < traces.n_ticks:
            raise InvalidSpec("start_tick", f"must be an integer tick in 0..{traces.n_ticks - 1}", source=source)
        return traces.time_of(tick)
    if "start" in data:
        value = data["start"]
        try:
            when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise InvalidSpec("start", "an ISO-8601 time with a timezone", source=source) from None
        if when.tzinfo is None:
            raise InvalidSpec("start", "give the time with a timezone, e.g. 2025-10-05T00:00:00Z", source=source)
        return when
    return traces.epoch


def _duration(value: Any, where: str, source: str) -> timedelta:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise InvalidSpec(where, str(exc), source=source) from None
