"""GPU fractions end to end on the local provider: real controller, API, agent and
job processes, with the GPU and MPS played by test stand-ins (no NVIDIA hardware
here): ``fake_gpu_driver.py`` in place of nvidia-ml-py's ``pynvml`` and
``stand_in_nvidia_cuda_mps_control.py`` in place of ``nvidia-cuda-mps-control``,
injected through the agent's test-only variables (spotfleet/agent/testing.py).

Three fractional jobs share one fake GPU: two get MPS shares (their thread
percentage and pinned-memory limit) and finish; the third holds more GPU memory
than its share and is stopped by the agent, with the reason in ``spotfleet job``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotfleet.cli.main import app
from spotfleet.config import Config, load_config
from spotfleet.ledger.usage import load_usage
from spotfleet.model import JobState
from spotfleet.model.spec import parse_spec
from spotfleet.service import Service
from tests.e2e.test_local_e2e import free_port, wait_for

pytestmark = pytest.mark.e2e
HERE = Path(__file__).parent
STAND_IN = HERE.parent / "agent" / "stand_in_nvidia_cuda_mps_control.py"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("SPOTFLEET_TEST_FAKE_NVML", str(HERE / "fake_gpu_driver.py"))
    monkeypatch.setenv("SPOTFLEET_TEST_MPS_CONTROL", str(STAND_IN))
    (tmp_path / "procs").mkdir()
    monkeypatch.setenv("SPOTFLEET_TEST_FAKE_GPU_PROCS", str(tmp_path / "procs"))
    return load_config(overrides={
        "data_dir": str(tmp_path / "data"), "api.port": free_port(), "reconcile.interval": "0.3s",
        "reconcile.idle_ttl": "60s", "reconcile.heartbeat": "0.3s",
        "providers": {"local": {"heartbeat": "0.3s", "max_instances": 2}},
        "gpu_partitioning": {"memory_over": "stop", "memory_grace_samples": 2},
    })  # fmt: skip


def fractional(name: str, share: float, memory_mib: int, sm: int, seconds: float, procs: Path) -> dict[str, object]:
    return {"name": name, "priority": "critical", "resources": {"gpu_fraction": share},
            "env": {"FAKE_GPU_PROCS": str(procs)},
            "command": ["python", str(HERE / "fake_cuda_job.py"), "--memory-mib", str(memory_mib), "--sm", str(sm),
                        "--seconds", str(seconds)]}  # fmt: skip


def gpu_env(log: str) -> dict[str, str]:
    (line,) = [x for x in log.splitlines() if x.startswith("GPU-ENV ")]
    env: dict[str, str] = json.loads(line.removeprefix("GPU-ENV "))
    return env


def test_two_fractions_get_mps_shares_and_a_job_over_its_memory_share_is_stopped(
    config: Config, tmp_path: Path
) -> None:
    service = Service(config)
    try:
        service.start_background()
        procs = tmp_path / "procs"
        submit = service.controller.submit
        half = submit(parse_spec(fractional("half", 0.5, 3000, 40, 4.0, procs))).id
        quarter = submit(parse_spec(fractional("quarter", 0.25, 1500, 20, 4.0, procs))).id
        greedy = submit(parse_spec(fractional("greedy", 0.25, 6000, 30, 60.0, procs))).id
        store = service.store
        wait_for("all three jobs done", lambda: all(store.get_job(i).terminal for i in (half, quarter, greedy)), 90)

        (inst,) = store.list_instances()
        assert [store.get_job(i).state for i in (half, quarter)] == [JobState.SUCCEEDED] * 2
        gpu_mib = inst.offering.gpu_memory_gib * 1024
        uuid = f"GPU-{inst.provider_id}-0"
        env_half, env_quarter = gpu_env(service.controller.logs(half)), gpu_env(service.controller.logs(quarter))
        assert env_half["CUDA_VISIBLE_DEVICES"] == env_quarter["CUDA_VISIBLE_DEVICES"] == uuid
        assert (env_half["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], env_quarter["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) == (
            "50", "25")  # fmt: skip
        assert env_half["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={int(0.5 * gpu_mib)}M"
        assert env_quarter["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={int(0.25 * gpu_mib)}M"
        assert env_half["CUDA_MPS_PIPE_DIRECTORY"] == env_quarter["CUDA_MPS_PIPE_DIRECTORY"]
        (recorded,) = list((tmp_path / "data").rglob("stand-in-commands.jsonl"))
        starts = [json.loads(x) for x in recorded.read_text().splitlines() if '"-d"' in x]
        assert starts and starts[0]["env"]["CUDA_VISIBLE_DEVICES"] == uuid  # one daemon, for this GPU

        g = store.get_job(greedy)
        limit = int(0.25 * gpu_mib)
        assert g.state is JobState.FAILED
        assert g.message.startswith(f"stopped by the agent: it holds 6000 MiB of GPU memory, over its {limit} MiB "
                                    "share (0.25 of GPU 0) for 2 samples in a row")  # fmt: skip
        assert any(e.kind == "job.gpu_memory_over" and e.level == "warning" for e in store.events(job_id=greedy))
        usage = load_usage(store, [half])[(half, 1, 0)]
        assert (usage.isolation, usage.given_share) == ("mps", 0.5) and usage.mean_used_share == pytest.approx(0.4)

        url = f"http://127.0.0.1:{service.bound_port}"
        shown = CliRunner().invoke(app, ["job", greedy, "--api", url])
        assert shown.exit_code == 0, shown.output
        words = " ".join(shown.output.split())
        assert "stopped by the agent: it holds 6000 MiB of GPU memory" in words and "failed" in words
        assert (
            f"attempt 1 node 0: MPS share: compute and memory capped, one GPU context shared; given 0.25 of a GPU, used 0.30; GPU memory peak 6000 of {limit} MiB"
            in words
        )
        half_view = " ".join(CliRunner().invoke(app, ["job", half, "--api", url]).output.split())
        assert "given 0.5 of a GPU, used 0.40" in half_view
    finally:
        if service.scheduler.running:  # the controller first, so its next step launches nothing after stop_all
            service.stop()
        for p in service.providers.values():
            p.stop_all()  # type: ignore[attr-defined]
