"""bench/gpu_agent_check.py's partition checks, run here against the fake NVML and
the stand-in MPS control (the real run needs a GPU machine): the MIG listing is
read-only, the two MPS jobs get their shares, the daemon is stopped after."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

from spotfleet.agent.telemetry import GpuTelemetry
from tests.agent.fake_nvml import FakeGpu, make_nvml, mig_a100

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = Path(__file__).with_name("stand_in_nvidia_cuda_mps_control.py")


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_agent_check", ROOT / "bench" / "gpu_agent_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mig_listing_reads_and_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    nvml = make_nvml([mig_a100("GPU-m", layout=["3g.20gb", "2g.10gb", "2g.10gb"]), FakeGpu(uuid="GPU-t")])
    tel = GpuTelemetry(nvml)
    listing = bench().mig_listing(tel)
    assert [(g["mig_mode"], [d["profile"] for d in g["devices"]]) for g in listing] == [
        ("on", ["3g.20gb", "2g.10gb", "2g.10gb"]), ("n/a", [])]  # fmt: skip
    assert nvml.state["calls"] == []  # type: ignore[attr-defined]  # no create/destroy
    assert "1x3g.20gb+2x2g.10gb" in capsys.readouterr().out


def test_two_mps_jobs_with_their_shares_then_quit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvidia-cuda-mps-control").symlink_to(STAND_IN)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    tel = GpuTelemetry(make_nvml([FakeGpu(uuid="GPU-t", memory_total_mib=16000)]))
    gpu0 = tel.sample()["gpus"][0]
    args = argparse.Namespace(shares="0.25,0.5", seconds=0.1, interval=0.05, mem_mib=1024)
    out = bench().mps_check(args, tel, gpu0)  # the CUDA workers fail here (no libcuda): the flow is what is checked
    assert out["mode"] == "mps"
    assert [(j["share"], j["thread_pct"], j["mem_limit"]) for j in out["jobs"]] == [
        (0.25, "25", "0=4000M"), (0.5, "50", "0=8000M")]  # fmt: skip
    (log,) = list(tmp_path.rglob("stand-in-commands.jsonl"))
    recorded = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["argv"] for r in recorded] == [["-d"], []] and recorded[1]["stdin"] == ["quit"]
    assert recorded[0]["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-t"
