"""examples/shared-gpu.yaml runs as written on the local provider: its MIG job
gets a device of its own, its fraction an MPS share. The GPU driver and MPS are
the test stand-ins of tests/e2e/test_gpu_partitions_e2e.py (no NVIDIA hardware
here); A100 instances get MIG-capable A100s (fake_mig_driver.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotfleet.config import load_config
from spotfleet.ledger.usage import load_usage
from spotfleet.model import JobState
from spotfleet.model.spec import load_specs
from spotfleet.service import Service
from tests.e2e.test_local_e2e import free_port, wait_for

pytestmark = pytest.mark.e2e
HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def test_the_shared_gpu_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTFLEET_TEST_FAKE_NVML", str(HERE / "fake_mig_driver.py"))
    monkeypatch.setenv("SPOTFLEET_TEST_MPS_CONTROL", str(HERE.parent / "agent" / "stand_in_nvidia_cuda_mps_control.py"))
    (tmp_path / "procs").mkdir()
    monkeypatch.setenv("SPOTFLEET_TEST_FAKE_GPU_PROCS", str(tmp_path / "procs"))
    config = load_config(overrides={
        "data_dir": str(tmp_path / "data"), "api.port": free_port(), "reconcile.interval": "0.3s",
        "reconcile.idle_ttl": "2s", "reconcile.heartbeat": "0.3s",
        "providers": {"local": {"heartbeat": "0.3s", "max_instances": 4}},
        "gpu_partitioning": {"mig_layouts": {"a100": "7x1g.5gb"}, "mig_reconfigure": True},
    })  # fmt: skip
    service = Service(config)
    try:
        service.start_background()
        specs = load_specs((ROOT / "examples" / "shared-gpu.yaml").read_text())
        ids = [service.controller.submit(spec).id for spec in specs]
        store = service.store
        wait_for("both example jobs done", lambda: all(store.get_job(i).terminal for i in ids), 120)
        assert [store.get_job(i).state for i in ids] == [JobState.SUCCEEDED] * 2, [
            (store.get_job(i).state, store.get_job(i).message) for i in ids
        ]
        usage = load_usage(store, ids)
        mig, fraction = (usage[(i, store.get_job(i).attempt, 0)] for i in ids)
        assert mig.isolation == "mig", "a MIG device of its own"
        assert (fraction.isolation, fraction.given_share) == ("mps", 0.5)
    finally:
        service.stop()
        for provider in service.providers.values():
            provider.stop_all()  # type: ignore[attr-defined]
