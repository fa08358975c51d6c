"""``spotfleet cost``: every output format parses, FOCUS columns have the right
names and types, the plot is a PNG, and the numbers agree across formats."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotfleet.cli.main import app
from spotfleet.ledger import focus
from spotfleet.providers.fake import FakeProvider, gpu_offering
from spotfleet.store import Store
from tests.controller.harness import make_harness
from tests.ledger.test_ledger_store import run_interrupted_job

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("cost")
    store = Store(f"sqlite:///{tmp / 'spotfleet.db'}")
    store.migrate()
    h = make_harness(store, tmp, FakeProvider(offering_list=[gpu_offering(zone="us-east-1a", spot=0.9),
                                                             gpu_offering(zone="us-east-1b", spot=0.95)]))  # fmt: skip
    job_id = run_interrupted_job(h)
    store.close()
    yield f"sqlite:///{tmp / 'spotfleet.db'}", job_id


def cost(*args: str) -> str:
    result = runner.invoke(app, ["cost", *args])
    assert result.exit_code == 0, result.output + result.stderr
    return result.stdout


def test_json_and_csv_parse_and_agree(db: tuple[str, str]) -> None:
    url, job_id = db
    data = json.loads(cost("report", "--db", url, "--by", "tenant", "--by", "market", "--format", "json"))
    assert data["group_by"] == ["tenant", "market"]
    totals = data["totals"]
    assert totals["jobs"] == 1 and totals["instances"] == 2
    assert totals["interruption_cost"] > 0 and totals["spot_share_pct"] == 100.0
    assert totals["savings"] == pytest.approx(totals["on_demand_equivalent"] - totals["cost"], abs=1e-6)
    assert sum(r["cost"] for r in data["rows"]) == pytest.approx(totals["cost"], abs=1e-6)
    assert {(r["tenant"], r["market"]) for r in data["rows"]} == {("research", "spot"), ("(idle)", "spot")}

    rows = list(csv.DictReader(io.StringIO(cost("report", "--db", url, "--by", "job", "--format", "csv"))))
    assert {r["job"] for r in rows} == {job_id, "(idle)"}
    assert sum(Decimal(r["cost"]) for r in rows) == Decimal(str(totals["cost"]))
    one = list(csv.DictReader(io.StringIO(cost("report", "--db", url, "--format", "csv"))))
    assert one[0]["scope"] == "total" and Decimal(one[0]["cost"]) == Decimal(str(totals["cost"]))


def test_focus_columns_names_and_types(db: tuple[str, str]) -> None:
    url, job_id = db
    rows = list(csv.DictReader(io.StringIO(cost("report", "--db", url, "--format", "focus"))))
    assert rows and list(rows[0]) == focus.COLUMNS
    for required in ("BilledCost", "EffectiveCost", "ListCost", "ChargePeriodStart", "ChargePeriodEnd", "ResourceId",
                     "ResourceType", "RegionId", "PricingCategory", "Tags"):  # fmt: skip
        assert required in rows[0]
    for r in rows:
        for col in focus.DECIMAL_COLUMNS:
            assert Decimal(r[col]) >= 0
        for col in focus.DATETIME_COLUMNS:
            assert r[col].endswith("Z") and datetime.fromisoformat(r[col].replace("Z", "+00:00")).tzinfo is not None
        assert r["ChargePeriodStart"] <= r["ChargePeriodEnd"]
        assert Decimal(r["ListCost"]) >= Decimal(r["BilledCost"]) == Decimal(r["EffectiveCost"])
        assert r["PricingCategory"] in ("Dynamic", "Standard") and r["BillingCurrency"] == "USD"
        tags = json.loads(r["Tags"])
        assert isinstance(tags, dict) and all(isinstance(v, str) for v in tags.values())
        assert tags["spotfleet:phase"] == r["x_SpotfleetPhase"]
    assert {json.loads(r["Tags"]).get("spotfleet:job") for r in rows} == {job_id, None}
    total = json.loads(cost("report", "--db", url, "--format", "json"))["totals"]["cost"]
    assert sum(Decimal(r["BilledCost"]) for r in rows) == Decimal(str(total))


def test_table_plot_and_windows(db: tuple[str, str], tmp_path: Path) -> None:
    url, _ = db
    png = tmp_path / "spend.png"
    out = cost("report", "--db", url, "--by", "day", "--plot", str(png))
    assert "saved" in out and "interruptions" in out and "2026-01-01" in out
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5000
    empty = json.loads(cost("report", "--db", url, "--since", "2026-01-02", "--format", "json"))
    assert empty["totals"]["cost"] == 0 and empty["rows"] == []
    part = json.loads(cost("report", "--db", url, "--since", "2026-01-01T00:10:00Z", "--format", "json"))
    whole = json.loads(cost("report", "--db", url, "--format", "json"))
    assert 0 < part["totals"]["cost"] < whole["totals"]["cost"]


def test_cost_job(db: tuple[str, str]) -> None:
    url, job_id = db
    data = json.loads(cost("job", job_id, "--db", url, "--format", "json"))
    assert [a["attempt"] for a in data["attempts"]] == [1, 2]
    assert data["attempts"][0]["redone_work_cost"] > 0 and data["attempts"][1]["restart_overhead_cost"] > 0
    assert data["gpu"]["peak_gpu_memory_mib"] == 14500.0
    assert sum(a["cost"] for a in data["attempts"]) == pytest.approx(data["totals"]["cost"], abs=1e-6)
    table = cost("job", job_id, "--db", url)
    assert "checkpointed" in table and "succeeded" in table


def test_bad_input_is_one_line_and_exit_2(db: tuple[str, str]) -> None:
    url, _ = db
    for args in (["--by", "colour"], ["--since", "last tuesday"], ["--billing", "aws"]):
        result = runner.invoke(app, ["cost", "report", "--db", url, *args])
        assert result.exit_code == 2, args
        assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    assert runner.invoke(app, ["cost", "job", "job-nope", "--db", url]).exit_code == 3  # not found (docs/cli.md)


def test_billing_rule_option_changes_the_minimum(db: tuple[str, str]) -> None:
    url, _ = db
    base = json.loads(cost("report", "--db", url, "--format", "json"))["totals"]
    longer = json.loads(cost("report", "--db", url, "--format", "json", "--billing", "fake=7200"))["totals"]
    assert longer["billing_minimum_cost"] > base["billing_minimum_cost"]
    # the extra is all billing minimum (each segment's cost is rounded once, so allow a few micro-dollars)
    extra = longer["billing_minimum_cost"] - base["billing_minimum_cost"]
    assert longer["cost"] - base["cost"] == pytest.approx(extra, abs=5e-6)


def test_reports_run_against_a_read_only_store(db: tuple[str, str]) -> None:
    url, _ = db
    path = url.removeprefix("sqlite:///")
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    assert json.loads(cost("report", "--db", read_only, "--format", "json"))["totals"]["jobs"] == 1
