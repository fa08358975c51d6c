"""``spotfleet simulate --json`` carries the timeline; the What-if page opens it
or says which field is wrong."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from spotfleet.api.app import create_app
from spotfleet.cli.main import app as cli
from spotfleet.errors import InvalidSpec
from spotfleet.store import Store
from spotfleet.web import whatif
from tests.controller.harness import make_harness
from tests.sim.test_sim_cli import write_traces


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("sim")
    traces = write_traces(tmp / "traces")
    workload = tmp / "w.yaml"
    workload.write_text("jobs:\n  - {name: train, work: 2h, deadline: 6h, resources: {gpus: 1}}\n")
    out = tmp / "r.json"
    run = CliRunner().invoke(cli, ["simulate", "--traces", str(traces), "--workload", str(workload),
                                   "--policy", "greedy", "--json", str(out)])  # fmt: skip
    assert run.exit_code == 0, run.output
    doc: dict[str, object] = json.loads(out.read_text())
    return doc


def test_the_json_has_cost_curves_and_spot_windows(result: dict[str, object]) -> None:
    curves = result["curves"]
    assert isinstance(curves, list) and len(curves) > 2
    assert curves[0]["cost"] == 0 and curves[-1]["cost"] == pytest.approx(result["cost"], abs=1e-3)
    assert curves[-1]["on_demand"] == pytest.approx(result["on_demand_cost"], abs=1e-3)
    assert all(a["cost"] <= b["cost"] and a["at"] <= b["at"] for a, b in itertools.pairwise(curves))
    windows = result["spot_available"]
    assert isinstance(windows, dict) and set(windows) == {"us-east-1a", "us-east-1b"}
    # us-east-1a: [1, 1, 0, 0, 1, 1] × 8 at 10-minute ticks → 20-minute windows
    first = windows["us-east-1a"][0]
    assert first == ["2026-01-01T00:00:00+00:00", "2026-01-01T00:20:00+00:00"]


def test_the_page_draws_it(result: dict[str, object], sqlite_store: Store, tmp_path: Path) -> None:
    client = TestClient(create_app(make_harness(sqlite_store, tmp_path).controller))
    resp = client.post("/whatif", files={"result": ("r.json", json.dumps(result), "application/json")})
    assert resp.status_code == 200
    assert 'id="whatif-zones"' in resp.text and 'id="whatif-curves"' in resp.text
    charts = whatif.charts(whatif.parse(json.dumps(result).encode()))
    assert {b["market"] for b in charts["timeline"]["bars"]} == {"spot"}
    assert charts["timeline"]["rows"] == ["us-east-1a", "us-east-1b"]
    assert len(charts["curves"]["at"]) == len(result["curves"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"{not json", "file"),
        (b"[1, 2]", "file"),
        (json.dumps({"policy": "optimal", "schedule": []}).encode(), "policy"),
        (json.dumps({"policy": "greedy"}).encode(), "start"),
    ],
)
def test_a_bad_file_is_422_naming_the_field(content: bytes, field: str, sqlite_store: Store, tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec) as err:
        whatif.parse(content)
    assert err.value.field == field
    client = TestClient(create_app(make_harness(sqlite_store, tmp_path).controller))
    resp = client.post("/whatif", files={"result": ("bad.json", content, "application/json")})
    assert resp.status_code == 422 and f"bad.json: {field}" in resp.text
    assert client.post("/whatif", data={"x": "1"}).status_code == 422
