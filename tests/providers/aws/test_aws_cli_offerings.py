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
    assert "price source" in result.output and "price age" in result.output
    # moto's placeholder spot price is replaced by the catalog's, and the footer says so
    assert "implausible live prices replaced" in result.output
    assert "snapshot" in result.output


def test_offerings_json_lines(moto: str, env: None) -> None:
    result = CliRunner().invoke(
        app, ["offerings", "-p", "aws", "--endpoint-url", moto, "--market", "spot", "--limit", "0", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
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
