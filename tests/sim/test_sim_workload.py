"""Workload files (scenario b): expansion, relative times, clear errors."""

from __future__ import annotations

from datetime import timedelta

import pytest

from spotfleet.errors import InvalidSpec
from spotfleet.sim.workload import parse_workload, single_job

from .helpers import MakeSet


def test_counts_relative_times_and_defaults(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1] * 10), tick=600)
    load = parse_workload(
        {
            "start_tick": 2,
            "restart": "6m",
            "jobs": [{"name": "ft", "arrival": "1h", "work": "3h", "deadline": "5h", "count": 2}],
        },
        traces,
    )
    start = traces.time_of(2)
    assert load.start == start and load.restart_seconds == 360
    assert [i.spec.name for i in load.items] == ["ft-1", "ft-2"]
    item = load.items[0]
    assert item.arrival == start + timedelta(hours=1)
    assert item.spec.deadline == start + timedelta(hours=6)
    assert item.spec.expected_duration == timedelta(hours=3) and item.work_seconds == 3 * 3600
    assert item.spec.command == "train"
    assert load.horizon() == start + 2 * timedelta(hours=6) + timedelta(days=1)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"jobs": []}, "jobs"),
        ({"jobs": [{"name": "a", "work": "1h"}], "speed": 2}, "speed"),
        ({"jobs": [{"name": "a"}]}, "jobs[0].work"),
        ({"jobs": [{"name": "a", "work": "soon"}]}, "jobs[0].work"),
        ({"jobs": [{"name": "a", "work": "1h", "count": 0}]}, "jobs[0].count"),
        ({"jobs": [{"name": "A", "work": "1h"}]}, "jobs[0].name"),
        ({"start_tick": 99, "jobs": [{"name": "a", "work": "1h"}]}, "start_tick"),
        ({"start": "2026-01-01T00:00:00", "jobs": [{"name": "a", "work": "1h"}]}, "start"),
    ],
)
def test_errors_name_the_field(make_set: MakeSet, data: dict[str, object], field: str) -> None:
    traces = make_set(("us-east-1a", [1] * 10), tick=600)
    with pytest.raises(InvalidSpec) as err:
        parse_workload(data, traces, source="w.yaml")
    assert err.value.field == field
    assert "w.yaml" in str(err.value)


def test_single_job_matches_the_trace_type(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1] * 10), tick=600)
    item = single_job(traces, work_hours=1, deadline_hours=2, start_tick=3)
    assert item.spec.resources.gpus == 1 and item.spec.resources.gpu_types == ["V100"]
    assert item.spec.deadline == traces.time_of(3) + timedelta(hours=2)


def test_start_ticks_are_even_reproducible_and_leave_the_window(make_set: MakeSet) -> None:
    from spotfleet.sim.scenario import start_ticks

    traces = make_set(("us-east-1a", [1] * 100), tick=600)  # 100 ticks of 10 min
    plain = start_ticks(traces, count=5, window_hours=2)  # the window is 12 ticks
    assert plain == [0, 22, 44, 66, 88]
    shifted = start_ticks(traces, count=5, window_hours=2, seed=3)
    assert shifted == start_ticks(traces, count=5, window_hours=2, seed=3) != plain
    assert all(0 <= t <= 88 for t in shifted)
    with pytest.raises(InvalidSpec):
        start_ticks(traces, count=5, window_hours=20)
