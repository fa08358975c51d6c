"""``spotfleet offerings --provider aws`` against the moto server prints types, prices and sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotfleet.cli.main import app


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("SPOTFLEET_DATA_DIR", str(tmp_path))


def test_offerings_table_shows_price_source_and_age(moto: str, env: None) -> None:
    result = CliRunner().invoke(
        app, ["offerings", "--provider", "aws", "--endpoint-url", moto, "--region", "us-east-1", "--gpu", "A10G"]
    )
    assert result.exit_code == 0, result.output
    assert "g5.xlarge" in result.output
    assert "PRICE SOURCE" in result.output and "PRICE AGE" in result.output
    # moto's placeholder spot price is replaced by the catalog's, and the footer says so
    assert "implausible live prices replaced" in result.output
    assert "snapshot" in result.output


def test_offerings_json(moto: str, env: None) -> None:
    result = CliRunner().invoke(
        app, ["offerings", "-p", "aws", "--endpoint-url", moto, "--market", "spot", "--limit", "0", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert "DescribeSpotPriceHistory" in result.stderr  # where the prices came from, on stderr
    assert rows and all(r["market"] == "spot" and r["price_per_hour"] > 0 and r["price_source"] for r in rows)
    assert not any(r["instance_type"].startswith("g5g.") for r in rows)  # arm64: not for an x86_64 AMI
    assert rows == sorted(rows, key=lambda r: r["price_per_hour"] / r["gpu_count"])


def test_offerings_for_local_and_gcp_use_the_catalog(env: None) -> None:
    for provider in ("local", "gcp"):
        result = CliRunner().invoke(app, ["offerings", "-p", provider, "--limit", "3"])
        assert result.exit_code == 0, result.output
        assert "catalog" in result.output


def test_unknown_provider_is_an_error() -> None:
    result = CliRunner().invoke(app, ["offerings", "-p", "azure"])
    assert result.exit_code == 2


def test_offline_by_default_across_clouds(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials anywhere: every cloud from the catalog, and it says so."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = CliRunner().invoke(app, ["offerings", "--limit", "0", "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["provider"] for r in rows} == {"aws", "gcp"}
    assert {r["price_source"] for r in rows} == {"catalog"}
    assert "no AWS credentials found" in result.stderr
    live = CliRunner().invoke(app, ["offerings", "-p", "aws", "--prices", "live"])
    assert live.exit_code == 4 and live.stderr.startswith("error: live AWS prices need credentials")
    assert len(live.stderr.strip().splitlines()) == 1


def test_gpus_summary_and_detail() -> None:
    result = CliRunner().invoke(app, ["gpus", "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["gpu"]: r for r in json.loads(result.stdout)}
    h100 = rows["H100"]
    assert h100["providers"] == ["aws", "gcp"] and 8 in h100["counts"]
    assert 0 < h100["spot_per_gpu_hour"] < h100["on_demand_per_gpu_hour"]
    detail = CliRunner().invoke(app, ["gpus", "H100", "-o", "json"])
    types = {r["instance_type"] for r in json.loads(detail.stdout)}
    assert {"p5.48xlarge", "a3-highgpu-8g"} <= types
    typo = CliRunner().invoke(app, ["gpus", "H10"])
    assert typo.exit_code == 2 and "did you mean 'H100'" in typo.stderr
