"""Trace loading: validation, alignment onto one grid, price fallbacks, queries."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from spotfleet.catalog import load_catalog
from spotfleet.model.offering import Market, Offering, Offerings
from spotfleet.sim.traces import DEFAULT_EPOCH, InvalidTrace, load_traces, read_trace_file

from .helpers import MakeSet, trace_file


def _write(path: Path, **overrides: object) -> Path:
    data: dict[str, object] = {
        "name": "t", "source": "test", "kind": "availability", "cloud": "gcp",
        "region": "us-central1", "zone": "us-central1-a", "instance_type": "a3-highgpu-8g",
        "gpu": "H100", "gpus_per_instance": 8, "start_time": "2025-10-04T00:00:00+00:00",
        "tick_seconds": 600, "on_demand_price": 80.0, "spot_price": [10.0, 11.0, 12.0],
        "requested": 1, "available": [1, 0, 1],
    }  # fmt: skip
    data.update(overrides)
    path.write_text(json.dumps(data))
    return path


def test_loads_a_directory_and_answers_queries_by_time(tmp_path: Path) -> None:
    _write(tmp_path / "a.json")
    _write(tmp_path / "b.json", zone="us-central1-b", spot_price=5.0, available=[0, 1, 1])
    traces = load_traces([tmp_path])
    t0 = datetime(2025, 10, 4, tzinfo=UTC)
    assert traces.epoch == t0 and traces.tick_seconds == 600 and traces.n_ticks == 3
    assert traces.keys() == ["gcp:a3-highgpu-8g:us-central1-a", "gcp:a3-highgpu-8g:us-central1-b"]
    assert traces.available_at("us-central1-a", t0 + timedelta(seconds=599)) == 1
    assert traces.available_at("us-central1-a", t0 + timedelta(seconds=600)) == 0
    assert traces.available_at("us-central1-a", t0 + timedelta(hours=5)) == 0  # past the end
    assert traces.available_at("us-central1-a", t0 - timedelta(seconds=1)) == 0  # before the start
    assert traces.spot_price_at("us-central1-a", t0 + timedelta(seconds=1300)) == 12.0
    assert traces.spot_price_at("gcp:a3-highgpu-8g:us-central1-b", t0) == 5.0
    assert traces.on_demand_price("us-central1-b") == 80.0


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"available": [1, 2, 0]}, "", "outside 0..requested"),
        ({"spot_price": [1.0, 2.0]}, "", "spot_price has 2 ticks but available has 3"),
        ({"spot_price": -1.0}, "spot_price", ">= 0"),
        ({"kind": "guess"}, "kind", "availability"),
        ({"tick_seconds": 0}, "tick_seconds", "greater than 0"),
        ({"start_time": "2025-10-04T00:00:00"}, "start_time", "timezone"),
        ({"available": []}, "available", "at least 1"),
    ],
)
def test_invalid_files_name_the_file_and_field(
    tmp_path: Path, overrides: dict[str, object], field: str, words: str
) -> None:
    path = _write(tmp_path / "bad.json", **overrides)
    with pytest.raises(InvalidTrace) as err:
        read_trace_file(path)
    assert err.value.field == field
    assert words in err.value.message
    assert str(path) in str(err.value)


def test_missing_field_and_bad_json_are_clear(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"name": "x"}))
    with pytest.raises(InvalidTrace, match="required field is missing"):
        read_trace_file(path)
    path.write_text("{not json")
    with pytest.raises(InvalidTrace, match="cannot read trace"):
        read_trace_file(path)
    with pytest.raises(InvalidTrace, match="no such file"):
        load_traces([tmp_path / "nope"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidTrace, match=r"no \*\.json"):
        load_traces([empty])


def test_duplicate_zone_across_directories_is_refused(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    _write(tmp_path / "one" / "a.json")
    _write(tmp_path / "two" / "a.json")
    with pytest.raises(InvalidTrace, match="two traces for gcp:a3-highgpu-8g:us-central1-a"):
        load_traces([tmp_path / "one", tmp_path / "two"])


def test_different_ticks_and_starts_are_resampled_onto_the_finest_grid(make_set: MakeSet) -> None:
    coarse = trace_file("us-east-1a", [1, 0], tick=600, start="2026-01-01T00:00:00Z", spot=[1.0, 2.0])
    fine = trace_file("us-east-1b", [0, 1, 1], tick=300, start="2026-01-01T00:05:00Z")
    traces = make_set(coarse, fine)
    assert traces.tick_seconds == 300 and traces.epoch == DEFAULT_EPOCH
    a = traces.zone("us-east-1a")
    b = traces.zone("us-east-1b")
    assert a.available.tolist() == [1, 1, 0, 0]
    assert a.spot_price.tolist()[:3] == [1.0, 1.0, 2.0]
    assert b.available.tolist() == [0, 0, 1, 1]  # nothing before its own start


def test_far_apart_traces_need_start_alignment(make_set: MakeSet) -> None:
    old = trace_file("us-east-1a", [1, 1], start="2020-01-01T00:00:00Z")
    new = trace_file("us-east-1b", [0, 1], start="2026-01-01T00:00:00Z")
    with pytest.raises(InvalidTrace, match="align='start'"):
        make_set(old, new)


def test_null_spot_price_comes_from_catalog_then_ratio(tmp_path: Path) -> None:
    base = dict(
        provider="aws", region="us-east-1", instance_type="p3.2xlarge", gpu="V100", gpu_count=1,
        gpu_memory_gib=16, vcpus=8, memory_gib=61, market=Market.SPOT, on_demand_price_per_hour=3.06,
    )  # fmt: skip
    catalog = Offerings(
        [
            Offering(zone="us-east-1a", price_per_hour=0.5, **base),  # type: ignore[arg-type]
            Offering(zone="use1-az2", price_per_hour=0.4, **base),  # type: ignore[arg-type]
            Offering(zone="use1-az3", price_per_hour=0.6, **base),  # type: ignore[arg-type]
        ]
    )
    for zone, region in (
        ("us-east-1a", "us-east-1"),
        ("us-east-1b", "us-east-1"),
        ("us-west-2a", "us-west-2"),
    ):
        _write(tmp_path / f"{zone}.json", cloud="aws", zone=zone, region=region,
               instance_type="p3.2xlarge", spot_price=None, on_demand_price=3.0)  # fmt: skip
    traces = load_traces([tmp_path], catalog=catalog, spot_ratio=0.25)
    got = {z.zone: (float(z.spot_price[0]), z.spot_price_source) for z in traces.zones}
    assert got == {
        "us-east-1a": (0.5, "catalog-zone"),
        "us-east-1b": (0.5, "catalog-region"),  # median of 0.4, 0.5, 0.6
        "us-west-2a": (0.75, "ratio"),
    }


def test_bundled_catalog_fills_gaps_when_none_given(tmp_path: Path) -> None:
    _write(tmp_path / "a.json", cloud="aws", zone="us-east-1a", region="us-east-1",
           instance_type="p3.2xlarge", spot_price=None, on_demand_price=3.06)  # fmt: skip
    traces = load_traces([tmp_path])
    bundled = [
        o.price_per_hour
        for o in load_catalog(["aws"]).spot()
        if o.instance_type == "p3.2xlarge" and o.region == "us-east-1"
    ]
    assert traces.zones[0].spot_price_source == "catalog-region"
    assert min(bundled) <= traces.zones[0].spot_price[0] <= max(bundled)


def test_only_selects_zones_and_types(make_set: MakeSet) -> None:
    traces = make_set(("us-east-1a", [1]), ("us-east-1b", [0]))
    assert traces.only(zones=["us-east-1b"]).keys() == ["aws:p3.2xlarge:us-east-1b"]
    with pytest.raises(InvalidTrace):
        traces.only(instance_type="p5.48xlarge")


def test_every_shared_trace_folder_loads(shared_traces: Path) -> None:
    folders = sorted(p for p in shared_traces.iterdir() if p.is_dir())
    assert len(folders) >= 4
    for folder in folders:
        traces = load_traces([folder])
        assert traces.n_ticks > 1000
        for zone in traces.zones:
            assert zone.available.shape == zone.spot_price.shape == (traces.n_ticks,)
            assert zone.spot_price.min() > 0 and zone.spot_price.max() < zone.on_demand_price
            assert 0 <= zone.availability_share <= 1
    v100 = load_traces([shared_traces / "aws-v100-2023-02"])
    assert v100.tick_seconds == 195 and len(v100.zones) == 6
    assert v100.epoch == datetime(2023, 2, 15, 22, 8, 16, tzinfo=UTC)
