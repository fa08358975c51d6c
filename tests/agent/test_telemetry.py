"""NVML collection against a fake pynvml module (same functions and error types)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotfleet.agent.telemetry import GpuTelemetry, JobGroup
from tests.agent.fake_nvml import FakeGpu, FakeMigDevice, FakeProcess, make_nvml

MIB = 1024 * 1024


def test_no_driver_is_said_once_and_sampling_carries_on(caplog: pytest.LogCaptureFixture) -> None:
    nvml = make_nvml([], driver=False)
    tel = GpuTelemetry(nvml)
    with caplog.at_level(logging.INFO, logger="spotfleet.agent.telemetry"):
        samples = [tel.sample([JobGroup("job-a", 1, 0, 100, (0,))]) for _ in range(3)]
    assert samples[0] == {"nvml": {"available": False, "reason": "NVMLError_LibraryNotFound: NVML Shared Library Not Found",
                                   "driver": None}}  # fmt: skip
    assert samples[0] == samples[2]
    assert nvml.state["init_calls"] == 1  # type: ignore[attr-defined]
    said = [r for r in caplog.records if "no NVIDIA driver" in r.getMessage()]
    assert len(said) == 1


def test_gpus_and_processes_are_attributed_to_jobs_by_process_group() -> None:
    gpus = [
        FakeGpu(uuid="GPU-a", utilization=3, memory_used_mib=500, processes=[FakeProcess(555, 500 * MIB)]),
        FakeGpu(uuid="GPU-b", utilization=88, memory_used_mib=9000, temperature=71, power_mw=212_400,
                processes=[FakeProcess(101, 6000 * MIB, sm_util=60), FakeProcess(102, 3000 * MIB, sm_util=25)]),
    ]  # fmt: skip
    groups = {101: 100, 102: 100, 555: 999}  # pid → process group
    tel = GpuTelemetry(make_nvml(gpus), pgid_of=groups.get)
    out = tel.sample([JobGroup("job-a", 2, 0, 100, (1,))])
    assert out["nvml"] == {"available": True, "reason": None, "driver": "550.54.15"}
    g0, g1 = out["gpus"]
    assert g0["processes"] == [{"pid": 555, "memory_mib": 500.0, "sm_util_pct": None, "job_id": None, "attempt": None,
                                "node_rank": None}]  # fmt: skip
    assert g1["utilization_pct"] == 88.0 and g1["temperature_c"] == 71 and g1["power_w"] == pytest.approx(212.4)
    assert g1["memory_used_mib"] == 9000.0 and g1["memory_total_mib"] == 23028.0 and g1["mig"] is None
    assert [p["job_id"] for p in g1["processes"]] == ["job-a", "job-a"]
    assert out["jobs"] == [{"job_id": "job-a", "attempt": 2, "node_rank": 0, "gpu_indices": [1],
                            "utilization_pct": 88.0, "memory_used_mib": 9000.0, "memory_total_mib": 23028.0,
                            "memory_source": "processes", "sm_util_pct": 85.0, "pids": [101, 102]}]  # fmt: skip


def test_unsupported_metrics_are_null_not_fatal() -> None:
    tel = GpuTelemetry(make_nvml([FakeGpu(power_mw=None, utilization=40)]), pgid_of=lambda _pid: None)
    gpu = tel.sample()["gpus"][0]
    assert gpu["power_w"] is None
    assert gpu["utilization_pct"] == 40.0


def test_job_memory_falls_back_to_its_gpus_when_pids_are_hidden() -> None:
    tel = GpuTelemetry(make_nvml([FakeGpu(utilization=50, memory_used_mib=7000)]), pgid_of=lambda _pid: None)
    job = tel.sample([JobGroup("job-b", 1, 0, 4242, (0,))])["jobs"][0]
    assert job["memory_used_mib"] == 7000.0 and job["pids"] == []
    assert job["memory_source"] == "gpus"  # not per process: never used to hold a job to a memory share


def test_mig_layout_is_read_and_mig_processes_attributed() -> None:
    a100 = FakeGpu(name="NVIDIA A100-SXM4-40GB", memory_total_mib=40960, mig=[
        FakeMigDevice("MIG-1", 3, 3, 20096, 1200, [FakeProcess(301, 1200 * MIB)]),
        None,  # an empty slot
        FakeMigDevice("MIG-2", 2, 2, 9856, 0),
    ])  # fmt: skip
    tel = GpuTelemetry(make_nvml([a100]), pgid_of={301: 300}.get)
    out = tel.sample([JobGroup("job-m", 1, 0, 300, (0,))])
    gpu = out["gpus"][0]
    assert gpu["utilization_pct"] is None  # NVML has no utilisation counters in MIG mode
    assert gpu["mig"] == {"enabled": True, "devices": [
        {"index": 0, "uuid": "MIG-1", "gpu_slices": 3, "compute_slices": 3, "memory_total_mib": 20096.0,
         "memory_used_mib": 1200.0},
        {"index": 2, "uuid": "MIG-2", "gpu_slices": 2, "compute_slices": 2, "memory_total_mib": 9856.0,
         "memory_used_mib": 0.0},
    ]}  # fmt: skip
    assert out["jobs"][0]["memory_used_mib"] == 1200.0 and out["jobs"][0]["utilization_pct"] is None


def test_real_process_group_lookup() -> None:
    # a real job-like process in its own session (as the runner starts jobs), with a child
    # that opened "the GPU": the child's pid maps to the job through os.getpgid
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess,sys,time; "
                               "c=subprocess.Popen([sys.executable,'-c','import time; time.sleep(30)']); "
                               "print(c.pid, flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        tel = GpuTelemetry(make_nvml([FakeGpu(utilization=90, processes=[FakeProcess(child, 100 * MIB)])]))
        out = tel.sample([JobGroup("job-r", 1, 0, parent.pid, (0,))])
        assert out["gpus"][0]["processes"][0]["job_id"] == "job-r"
        assert out["jobs"][0]["pids"] == [child]
    finally:
        os.killpg(parent.pid, 9)
        parent.wait()


def test_job_groups_of_the_real_runner(tmp_path: Path) -> None:
    """The agent feeds the collector from the real JobRunner: its job processes'
    group ids must be what os.getpgid reports for processes inside the job."""
    from spotfleet.agent.runner import JobRunner
    from spotfleet.agent.telemetry import job_groups
    from spotfleet.clock import FakeClock
    from spotfleet.wire import Assignment

    runner = JobRunner(work_dir=tmp_path, clock=FakeClock())
    code = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(30)']); time.sleep(30)"
    a = Assignment(job_id="job-g", attempt=3, node_rank=0, name="g", command=[sys.executable, "-c", code],
                   gpu_indices=[1], checkpoint_dir=str(tmp_path / "ckpt"))  # fmt: skip
    runner.reconcile([a])
    try:
        (group,) = job_groups(runner)
        assert (group.job_id, group.attempt, group.node_rank, group.gpu_indices) == ("job-g", 3, 0, (1,))
        (proc,) = runner.procs.values()
        assert os.getpgid(proc.popen.pid) == group.pgid
        tel = GpuTelemetry(
            make_nvml([FakeGpu(), FakeGpu(utilization=70, processes=[FakeProcess(proc.popen.pid, 64 * MIB)])])
        )
        assert tel.sample([group])["jobs"][0]["pids"] == [proc.popen.pid]
    finally:
        runner.stop_all()
