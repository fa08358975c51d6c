"""The HTTP control endpoint, the client helpers and the ``python -m`` entry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from spotfleet.errors import InvalidSpec
from spotfleet.metadata import (
    AwsImdsServer,
    GcpMetadataServer,
    UnsupportedNotice,
    control,
    server_for,
)


def test_notice_and_clear_over_http(imds: AwsImdsServer) -> None:
    state = control.inject_notice(imds.url, "spot", notice_seconds=90, action="stop")
    assert state["deadline"] == "2026-03-01T12:01:30Z"
    assert state["notices"] == {"spot": "2026-03-01T12:01:30Z"}
    assert "spot" in imds.announced_at
    assert control.clear_notice(imds.url)["notices"] == {}


def test_refused_notice_is_a_typed_error(gce: GcpMetadataServer, imds: AwsImdsServer) -> None:
    with pytest.raises(UnsupportedNotice, match="rebalance"):
        control.inject_notice(gce.url, "rebalance")
    with pytest.raises(UnsupportedNotice):
        control.inject_notice(imds.url, "spot", action="explode")


def test_bad_control_requests(imds: AwsImdsServer) -> None:
    assert httpx.post(imds.url + "/_spotfleet/notice", content=b"not json").status_code == 400
    assert httpx.post(imds.url + "/_spotfleet/notice", content=b"[1]").status_code == 400
    assert httpx.post(imds.url + "/_spotfleet/nothing", json={}).status_code == 404
    assert httpx.get(imds.url + "/_spotfleet/notice").status_code == 405


def test_faults_over_http_do_not_hit_the_control_endpoint(imds: AwsImdsServer) -> None:
    control.inject_faults(imds.url, fail_next=2, status=503)
    assert control.state(imds.url)["pending_faults"] == 2  # control requests bypass faults
    assert httpx.get(imds.url + "/latest/meta-data/instance-id").status_code == 503
    assert httpx.get(imds.url + "/latest/meta-data/instance-id").status_code == 503
    assert httpx.get(imds.url + "/latest/meta-data/instance-id").status_code == 401


def test_expire_tokens_over_http(imds: AwsImdsServer) -> None:
    ttl = {"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    token = httpx.put(imds.url + "/latest/api/token", headers=ttl).text
    control.inject_faults(imds.url, expire_tokens=True)
    response = httpx.get(imds.url + "/latest/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": token})
    assert response.status_code == 401


def test_server_for() -> None:
    assert isinstance(server_for("aws", instance_id="i", zone="z"), AwsImdsServer)
    assert isinstance(server_for("gcp", instance_id="i", zone="z"), GcpMetadataServer)
    with pytest.raises(InvalidSpec):
        server_for("azure", instance_id="i", zone="z")


@pytest.mark.parametrize("flavor", ["aws", "gcp"])
def test_module_entry_point_writes_its_port(tmp_path: Path, flavor: str) -> None:
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "spotfleet.metadata", "--flavor", flavor, "--port", "0",
         "--instance-id", "i-77", "--zone", "us-east-1a", "--port-file", str(port_file)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed after the port file is written
        assert "i-77" in line
        url = f"http://127.0.0.1:{int(port_file.read_text())}"
        state = control.inject_notice(url, "spot", notice_seconds=30)
        assert state["flavor"] == flavor and state["instance_id"] == "i-77"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
