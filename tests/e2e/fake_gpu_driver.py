"""A scripted NVIDIA driver for e2e tests on machines without GPUs — TEST ONLY.

The agent of a local instance loads this file in place of ``pynvml`` when
``SPOTFLEET_TEST_FAKE_NVML`` names it (``spotfleet/agent/testing.py``). It is
``tests/agent/fake_nvml.make_nvml`` (nvidia-ml-py's names, constants and
error types) over as many GPUs as the instance has (its ``instance.json``, in
the agent's working directory), with UUIDs ``GPU-<provider id>-<index>``.

Its process table is a directory (``SPOTFLEET_TEST_FAKE_GPU_PROCS``): a fake
CUDA job (``fake_cuda_job.py``) writes ``<pid>.json`` with the device it was
given (its ``CUDA_VISIBLE_DEVICES``), the memory it "holds" and its SM use;
while that pid lives, NVML lists it as a compute process on that GPU.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: tests.agent.fake_nvml

from tests.agent.fake_nvml import MIB, FakeGpu, FakeMigDevice, FakeProcess, make_nvml

PROCS = Path(os.environ.get("SPOTFLEET_TEST_FAKE_GPU_PROCS", "/nonexistent"))
_spec = json.loads(Path("instance.json").read_text()) if Path("instance.json").exists() else {"gpus": 1}
_pid = _spec.get("provider_id", "local")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _processes(handle: FakeGpu | FakeMigDevice) -> list[FakeProcess]:
    if not isinstance(handle, FakeGpu):
        return []
    index = GPUS.index(handle)
    out = []
    for path in sorted(PROCS.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("device") in (handle.uuid, str(index)) and _alive(int(rec["pid"])):
            out.append(FakeProcess(int(rec["pid"]), int(rec["memory_mib"]) * MIB, sm_util=rec.get("sm")))
    return out


GPUS = [FakeGpu(name="NVIDIA T4 (fake)", uuid=f"GPU-{_pid}-{i}", memory_total_mib=15360, utilization=50,
                process_source=_processes) for i in range(int(_spec.get("gpus") or 1))]  # fmt: skip
_nvml = make_nvml(GPUS)
globals().update({k: v for k, v in vars(_nvml).items() if k.startswith(("nvml", "NVML"))})
