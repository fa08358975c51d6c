"""bench/import_traces.py: public spot-trace formats to the simulator's trace files, on hand-made inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from spotfleet.sim.traces import load_traces, read_trace_file

from .helpers import REPO, load_bench

V100 = ["--instance-type", "p3.2xlarge", "--gpu", "V100", "--on-demand-price", "3.06"]


def bench() -> ModuleType:
    return load_bench("import_traces")


def spot_traces_file(folder: Path, stem: str, data: Any, *, gap: Any = 195, **extra: Any) -> Path:
    """A skypilot-org/spot-traces file: ``{"metadata": {"gap_seconds"}, "data"}`` (1 = available)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": data, **extra}))
    return path


def skynomad_dir(parent: Path, zone: str, data: Any, *, prices: list[float] | None = None, **meta: Any) -> Path:
    """A skynomad-artifact converted trace ``<zone>_h100_16/full.json`` (1 = preempted), and a window file."""
    folder = parent / f"{zone}_h100_16"
    folder.mkdir(parents=True, exist_ok=True)
    region = zone.rsplit("-", 1)[0]
    metadata = {
        "gap_seconds": 600,
        "start_time": "2025-10-04T00:10:00.002281+00:00",
        "zone": zone,
        "price_info": {
            "region": region,
            "machine_type": "a3-highgpu-8g",
            "price": 18.979008,
            "on_demand_price": 82.52543396,
            "components": [{"label": "cpu", "quantity": 96.0}, {"label": "gpu", "quantity": 8.0}],
        },
        **meta,
    }
    body = {"metadata": metadata, "data": data, "prices": prices if prices is not None else [18.979008] * len(data)}
    (folder / "full.json").write_text(json.dumps(body))
    (folder / "0.json").write_text(json.dumps({**body, "data": [1] * 2, "prices": [18.979008] * 2}))
    return folder


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = bench().main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_spot_traces_file_converts_with_kind_zone_and_region_from_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = spot_traces_file(tmp_path / "availability/1-node/aws-02-15-2023", "us-east-1d_v100_1", [0, 1, 1, 0, 1])
    out = tmp_path / "out" / "v100"  # created, parents too
    code, printed, err = run(capsys, src, "--out", out, *V100, "--spot-price", "0.918",
                             "--start-time", "2023-02-15T23:08:16+01:00")  # fmt: skip
    assert code == 0, err
    written = json.loads((out / "us-east-1d.json").read_text())
    assert written == {
        "name": "aws-p3.2xlarge-us-east-1d",
        "source": written["source"],
        "kind": "availability",
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "us-east-1d",
        "instance_type": "p3.2xlarge",
        "gpu": "V100",
        "gpus_per_instance": 1,
        "start_time": "2023-02-15T22:08:16+00:00",
        "tick_seconds": 195,
        "on_demand_price": 3.06,
        "spot_price": 0.918,
        "requested": 1,
        "available": [0, 1, 1, 0, 1],
    }
    assert written["source"].startswith("skypilot-org/spot-traces availability/1-node/aws-02-15-2023/us-east-1d_v100_1")
    traces = load_traces([out])
    assert traces.zones[0].available.tolist() == [0, 1, 1, 0, 1] and traces.tick_seconds == 195
    lines = printed.splitlines()
    assert lines[0].startswith("us-east-1d: 5 ticks x 195 s, available 60.0%, spot $0.918/h")
    assert json.loads(lines[-1]) == {"files": 1, "out": str(out)}


def test_per_tick_price_file_and_a_preemption_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "spot-traces" / "preemption" / "1-node" / "aws-04-22-2023"
    spot_traces_file(folder, "us-east-1c_v100_1", [1, 1, 0], gap=32)
    spot_traces_file(folder, "us-west-2b_v100_1", [0, 1, 1], gap=32)
    prices = tmp_path / "v100_spot_prices.json"
    prices.write_text(json.dumps({"us-east-1c_v100_1": [0.9180001, 1.2, 1.234567891], "us-west-2b_v100_1": [0.9] * 3}))
    out = tmp_path / "out"
    code, printed, err = run(capsys, folder, "--out", out, *V100, "--spot-prices", prices)
    assert code == 0, err
    east, west = read_trace_file(out / "us-east-1c.json"), read_trace_file(out / "us-west-2b.json")
    assert east.kind == west.kind == "preemption" and east.tick_seconds == 32
    assert east.spot_price == [0.918, 1.2, 1.23457]  # rounded to 5 decimals
    assert west.spot_price == 0.9  # a series that never changes is stored as its constant
    assert east.start_time is None and east.region == "us-east-1" and west.region == "us-west-2"
    assert "per-tick spot prices from v100_spot_prices.json[us-east-1c_v100_1]" in east.source
    assert {z.spot_price_source for z in load_traces([out]).zones} == {"trace"}
    assert json.loads(printed.splitlines()[-1])["files"] == 2


def test_a_file_of_its_own_prices_and_one_without_any(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "preemption"
    spot_traces_file(folder, "us-east-1c_v100_1", [1, 0], prices=[0.918, 0.918])
    spot_traces_file(folder, "us-east-1f_v100_1", [1, 1])
    out = tmp_path / "out"
    assert run(capsys, folder, "--out", out, *V100)[0] == 0
    assert read_trace_file(out / "us-east-1c.json").spot_price == 0.918
    assert read_trace_file(out / "us-east-1f.json").spot_price is None  # left to the simulator's catalog


def test_multi_node_counts_set_requested(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = spot_traces_file(tmp_path / "availability" / "16-node", "us-west-2c_v100_1", [0, 3, 16, 5])
    assert run(capsys, src, "--out", tmp_path / "a", *V100)[0] == 0
    tf = read_trace_file(tmp_path / "a" / "us-west-2c.json")
    assert tf.requested == 16 and tf.available == [0, 3, 16, 5]
    assert run(capsys, src, "--out", tmp_path / "b", *V100, "--requested", "20")[0] == 0
    assert read_trace_file(tmp_path / "b" / "us-west-2c.json").requested == 20
    zeros = spot_traces_file(tmp_path / "availability", "us-west-2a_v100_1", [0, 0])
    assert run(capsys, zeros, "--out", tmp_path / "c", *V100)[0] == 0
    assert read_trace_file(tmp_path / "c" / "us-west-2a.json").requested == 1  # at least 1


def test_gcp_zone_and_region(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = spot_traces_file(tmp_path / "preemption", "us-central1-a_c3-88", [1, 0], gap=30)
    code, _, err = run(capsys, src, "--out", tmp_path / "out", "--cloud", "gcp", "--instance-type", "c3-highcpu-88",
                       "--gpu", "none", "--on-demand-price", "3.5")  # fmt: skip
    assert code == 0, err
    tf = read_trace_file(tmp_path / "out" / "us-central1-a.json")
    assert (tf.cloud, tf.region, tf.name) == ("gcp", "us-central1", "gcp-c3-highcpu-88-us-central1-a")


def test_skynomad_data_is_inverted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1 = preempted in the artifact, 1 = available in the simulator."""
    folder = skynomad_dir(tmp_path / "converted_multi_region_aligned_h100_16_merged", "us-central1-a",
                          [1, 0, 0, 1, 1, 0])  # fmt: skip
    out = tmp_path / "out"
    code, printed, err = run(capsys, folder, "--out", out, "--gpu", "H100")  # the directory: full.json, not 0.json
    assert code == 0, err
    written = json.loads((out / "us-central1-a.json").read_text())
    assert written["available"] == [0, 1, 1, 0, 0, 1]
    expected = {
        "name": "gcp-a3-highgpu-8g-us-central1-a",
        "kind": "availability",
        "cloud": "gcp",
        "region": "us-central1",
        "zone": "us-central1-a",
        "instance_type": "a3-highgpu-8g",
        "gpu": "H100",
        "gpus_per_instance": 8,  # the gpu billing component's quantity
        "start_time": "2025-10-04T00:10:00.002281+00:00",
        "tick_seconds": 600,
        "on_demand_price": 82.52543,
        "spot_price": 18.97901,
        "requested": 1,
    }
    assert {k: written[k] for k in expected} == expected
    assert written["source"].startswith(
        "andylizf/skynomad-artifact converted_multi_region_aligned_h100_16_merged/us-central1-a_h100_16/full.json"
    )
    assert "inverted" in written["source"]
    assert load_traces([out]).zones[0].availability_share == pytest.approx(0.5)
    assert json.loads(printed.splitlines()[-1]) == {"files": 1, "out": str(out)}


def test_skynomad_set_directory_and_varying_prices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = tmp_path / "merged"
    skynomad_dir(parent, "us-central1-a", [0, 1, 0])
    skynomad_dir(parent, "europe-west1-c", [1, 1, 0], prices=[16.35632, 16.356321234, 17.0],
                 gap_filled={"gap_start_index": 1, "gap_end_index": 1, "fill_strategy": "last_state_1"})  # fmt: skip
    out = tmp_path / "out"
    code, printed, err = run(capsys, parent, "--out", out, "--gpu", "H100", "--gpus-per-instance", "4")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["europe-west1-c.json", "us-central1-a.json"]
    europe = read_trace_file(out / "europe-west1-c.json")
    assert europe.available == [0, 0, 1] and europe.spot_price == [16.35632, 16.35632, 17.0]
    assert europe.gpus_per_instance == 4 and "ticks 1-1 were filled in" in europe.source
    assert len(load_traces([out]).zones) == 2
    assert "europe-west1-c: 3 ticks x 600 s, available 33.3%, spot $16.36-17/h" in printed


def test_kind_comes_from_the_path_or_from_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = spot_traces_file(tmp_path / "traces", "us-east-1a_v100_1", [1])
    code, _, err = run(capsys, src, "--out", tmp_path / "a", *V100)
    assert code == 2 and "--kind" in err and "availability" in err
    assert run(capsys, src, "--out", tmp_path / "b", *V100, "--kind", "preemption")[0] == 0
    assert read_trace_file(tmp_path / "b" / "us-east-1a.json").kind == "preemption"
    # the deepest directory named so wins
    nested = spot_traces_file(tmp_path / "availability" / "x" / "preemption", "us-east-1a_v100_1", [1])
    assert run(capsys, nested, "--out", tmp_path / "c", *V100)[0] == 0
    assert read_trace_file(tmp_path / "c" / "us-east-1a.json").kind == "preemption"


def _skynomad_full(tmp_path: Path, data: Any) -> Path:
    return skynomad_dir(tmp_path / "sky", "us-central1-a", data) / "full.json"


def _no_data(folder: Path) -> Path:
    (folder / "availability").mkdir()
    return _write(folder / "availability" / "us-east-1a_v100_1.json", {"metadata": {"gap_seconds": 60}})


def _zone_file(folder: Path, data: Any, stem: str = "us-east-1a_v100_1", **kw: Any) -> Path:
    return spot_traces_file(folder / "availability", stem, data, **kw)


@pytest.mark.parametrize(
    ("make", "extra", "field"),
    [
        pytest.param(lambda d: _zone_file(d, None), (), "data", id="data-null"),
        pytest.param(_no_data, (), "data: missing", id="data-missing"),
        pytest.param(lambda d: _zone_file(d, {"0": 1}), (), "data", id="data-not-a-list"),
        pytest.param(lambda d: _zone_file(d, []), (), "data", id="data-empty"),
        pytest.param(lambda d: _zone_file(d, [1, -1]), (), "data[1]", id="negative"),
        pytest.param(lambda d: _zone_file(d, [1, 0.5]), (), "data[1]", id="fraction"),
        pytest.param(lambda d: _zone_file(d, [1, 2]), ("--requested", "1"), "data[1]", id="over-requested"),
        pytest.param(lambda d: _zone_file(d, [1], gap=0), (), "metadata.gap_seconds", id="gap-zero"),
        pytest.param(lambda d: _zone_file(d, [1], gap=None), (), "metadata.gap_seconds", id="gap-null"),
        pytest.param(lambda d: _zone_file(d, [1, 1], prices=[1.0]), (), "prices", id="own-prices-length"),
        pytest.param(lambda d: _zone_file(d, [1], "useast_v100_1"), (), "zone", id="zone-unreadable"),
        pytest.param(lambda d: _zone_file(d, [1], "us-central1-a_v100_1"), (), "--cloud gcp", id="zone-other-cloud"),
        pytest.param(lambda d: _write(d / "list.json", [1, 0, 1]), (), "JSON list", id="not-an-object"),
        pytest.param(lambda d: _write(d / "other.json", {"ticks": [1, 0]}), (), "unknown format", id="unknown-format"),
        pytest.param(lambda d: _write(d / "not-json.json", "{"), (), "not JSON", id="not-json"),
        pytest.param(lambda d: _skynomad_full(d, [0, 2, 1]), (), "data[1]", id="skynomad-not-0-1"),
    ],
)
def test_bad_input_exits_2_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, extra: tuple[str, ...], field: str
) -> None:
    src = make(tmp_path)
    out = tmp_path / "out"
    code, printed, err = run(capsys, src, "--out", out, *V100, *extra)
    assert code == 2 and not printed
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert str(src) in err and field in err
    assert not out.exists()  # nothing written


def _write(path: Path, content: Any) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.mark.parametrize("missing", ["--instance-type", "--gpu", "--on-demand-price"])
def test_spot_traces_needs_what_the_file_does_not_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    src = spot_traces_file(tmp_path / "availability", "us-east-1a_v100_1", [1])
    i = V100.index(missing)
    code, _, err = run(capsys, src, "--out", tmp_path / "out", *V100[:i], *V100[i + 2 :])
    assert code == 2 and str(src) in err and f"{missing}: required" in err and f"pass e.g. {missing}" in err


def test_skynomad_needs_gpu_and_refuses_spot_traces_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full = _skynomad_full(tmp_path, [0, 1])
    code, _, err = run(capsys, full, "--out", tmp_path / "out")
    assert code == 2 and str(full) in err and "--gpu: required" in err
    code, _, err = run(capsys, full, "--out", tmp_path / "out", "--gpu", "H100", "--requested", "16")
    assert code == 2 and "--requested" in err
    # forced through as counts, the inverted data would be read upside down: refused
    code, _, err = run(capsys, full, "--out", tmp_path / "out", *V100, "--format", "spot-traces")
    assert code == 2 and "metadata.price_info" in err and "inverted" in err
    window = full.parent / "0.json"
    code, _, err = run(capsys, window, "--out", tmp_path / "out", "--gpu", "H100")
    assert code == 2 and str(window) in err and "full.json" in err
    assert not (tmp_path / "out").exists()


def test_price_file_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = spot_traces_file(tmp_path / "availability", "us-east-1a_v100_1", [1, 0, 1])
    prices = _write(tmp_path / "prices.json", {"us-east-1c_v100_1": [1.0, 1.0, 1.0]})
    code, _, err = run(capsys, src, "--out", tmp_path / "out", *V100, "--spot-prices", prices)
    assert code == 2 and str(src) in err and "--spot-prices" in err and "'us-east-1a_v100_1'" in err
    assert "--spot-price for a constant" in err
    _write(prices, {"us-east-1a_v100_1": [1.0, 1.0]})
    code, _, err = run(capsys, src, "--out", tmp_path / "out", *V100, "--spot-prices", prices)
    assert code == 2 and "--spot-prices['us-east-1a_v100_1']" in err and "2 prices but data has 3 ticks" in err
    _write(prices, {"us-east-1a_v100_1": [1.0, -1.0, 1.0]})
    code, _, err = run(capsys, src, "--out", tmp_path / "out", *V100, "--spot-prices", prices)
    assert code == 2 and "--spot-prices['us-east-1a_v100_1'][1]" in err
    _write(prices, [1.0])
    code, _, err = run(capsys, src, "--out", tmp_path / "out", *V100, "--spot-prices", prices)
    assert code == 2 and str(prices) in err
    code, _, err = run(capsys, src, "--out", tmp_path / "out", *V100, "--spot-prices", tmp_path / "nowhere.json")
    assert code == 2 and "nowhere.json" in err and "cannot read" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--on-demand-price", "-3"], "--on-demand-price"),
        (["--spot-price", "1", "--spot-prices", "p.json"], "--spot-prices: not allowed with argument --spot-price"),
        (["--start-time", "2023-02-15T22:08:16"], "--start-time"),
        (["--format", "csv"], "--format"),
    ],
)
def test_bad_options_are_one_line_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    with pytest.raises(SystemExit) as done:
        bench().main(["x.json", "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert done.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = spot_traces_file(tmp_path / "availability", "us-east-1a_v100_1", [1, 0])
    out = tmp_path / "out"
    assert run(capsys, src, "--out", out, *V100, "--spot-price", "1")[0] == 0
    before = (out / "us-east-1a.json").read_text()
    code, _, err = run(capsys, src, "--out", out, *V100, "--spot-price", "2")
    assert code == 2 and str(out / "us-east-1a.json") in err and "--force" in err
    assert (out / "us-east-1a.json").read_text() == before
    assert run(capsys, src, "--out", out, *V100, "--spot-price", "2", "--force")[0] == 0
    assert read_trace_file(out / "us-east-1a.json").spot_price == 2.0
    assert sorted(p.name for p in out.iterdir()) == ["us-east-1a.json"]  # no temporary file left


def test_nothing_is_written_when_one_input_fails_or_two_share_a_zone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = spot_traces_file(tmp_path / "availability", "us-east-1a_v100_1", [1, 0])
    bad = spot_traces_file(tmp_path / "availability", "us-east-1b_v100_1", [1, 7], gap=195)
    out = tmp_path / "out"
    code, _, err = run(capsys, good, bad, "--out", out, *V100, "--requested", "1")
    assert code == 2 and str(bad) in err and not out.exists()
    twin = spot_traces_file(tmp_path / "availability", "us-east-1a_k80_1", [1, 1])
    code, _, err = run(capsys, good, twin, "--out", out, *V100)
    assert code == 2 and "zone" in err and str(good) in err and "separate --out" in err and not out.exists()


def test_runs_as_a_module_and_as_a_script(tmp_path: Path) -> None:
    src = spot_traces_file(tmp_path / "availability", "us-east-1a_v100_1", [1, 0, 1])
    for i, how in enumerate((["-m", "bench.import_traces"], ["bench/import_traces.py"])):
        out = tmp_path / f"out{i}"
        done = subprocess.run([sys.executable, *how, str(src), "--out", str(out), *V100],
                              cwd=REPO, capture_output=True, text=True, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[-1]) == {"files": 1, "out": str(out)}
        assert read_trace_file(out / "us-east-1a.json").available == [1, 0, 1]
