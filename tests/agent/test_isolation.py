"""What a job node gets of its GPU (MIG device, MPS share, time-sliced, whole),
how the runner starts or refuses it, and how a job over its memory share is
warned about and stopped — against the fake NVML and the stand-in MPS control."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spotfleet.agent.enforce import MemoryGuard
from spotfleet.agent.isolation import GpuGrant, GpuShares, Refusal, annotate
from spotfleet.agent.mps import MpsDaemons
from spotfleet.agent.partitions import MigNode
from spotfleet.agent.runner import JobRunner
from spotfleet.agent.telemetry import GpuTelemetry, JobGroup
from spotfleet.clock import FakeClock
from spotfleet.wire import Assignment, MigOrder, Partition
from tests.agent.fake_nvml import FakeGpu, FakeProcess, make_nvml, mig_a100
from tests.agent.test_mps import STAND_IN, commands

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
MIB = 1024 * 1024


def shares_for(gpus: list[FakeGpu], tmp_path: Path, *, control: str = STAND_IN) -> GpuShares:
    tel = GpuTelemetry(make_nvml(gpus))
    return GpuShares(MigNode(tel.nvml, now=lambda: T0), MpsDaemons(root=tmp_path / "mps", control=control), tel.nvml)


@pytest.fixture
def shares(tmp_path: Path) -> Iterator[GpuShares]:
    s = shares_for([FakeGpu(uuid="GPU-a10g-0"), FakeGpu(uuid="GPU-a10g-1")], tmp_path)
    yield s
    s.mps.stop_all()


def assignment(job_id: str, *, gpus: list[int], partition: Partition | None = None, tmp: Path) -> Assignment:
    return Assignment(job_id=job_id, attempt=1, name=job_id, command=["sleep", "30"], gpu_indices=gpus,
                      checkpoint_dir=str(tmp / "ckpt" / job_id), partition=partition)  # fmt: skip


def fraction(share: float, limit: float, **kw: object) -> Partition:
    return Partition(kind="fraction", fraction=share, memory_limit_mib=limit, **kw)  # type: ignore[arg-type]


def test_two_fractions_on_one_gpu_are_mps_clients_with_their_own_shares(shares: GpuShares, tmp_path: Path) -> None:
    a = shares.grant(("a", 1, 0), assignment("a", gpus=[1], partition=fraction(0.25, 5722), tmp=tmp_path))
    b = shares.grant(("b", 1, 0), assignment("b", gpus=[1], partition=fraction(0.75, 17166), tmp=tmp_path))
    assert isinstance(a, GpuGrant) and isinstance(b, GpuGrant) and a.isolation == b.isolation == "mps"
    assert a.env["CUDA_VISIBLE_DEVICES"] == b.env["CUDA_VISIBLE_DEVICES"] == "GPU-a10g-1"
    assert (a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], b.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]) == ("25", "75")
    assert (a.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], b.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]) == ("0=5722M",
                                                                                                       "0=17166M")  # fmt: skip
    assert a.env["CUDA_MPS_PIPE_DIRECTORY"] == b.env["CUDA_MPS_PIPE_DIRECTORY"]  # one daemon for GPU 1
    assert [c["argv"] for c in commands(shares.mps, 1)] == [["-d"]]
    shares.release(("a", 1, 0))
    assert 1 in shares.mps.running  # b still uses it
    shares.release(("b", 1, 0))
    assert 1 not in shares.mps.running and commands(shares.mps, 1)[-1]["stdin"] == ["quit"]


def test_without_mps_a_fraction_runs_time_sliced_and_says_so(tmp_path: Path) -> None:
    s = shares_for([FakeGpu()], tmp_path, control=str(tmp_path / "absent"))
    g = s.grant(("a", 1, 0), assignment("a", gpus=[0], partition=fraction(0.5, 11000), tmp=tmp_path))
    assert isinstance(g, GpuGrant) and g.isolation == "time-sliced" and g.env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert g.note is not None and g.note.startswith("MPS unavailable:") and "not found" in g.note
    off = s.grant(("b", 1, 0), assignment("b", gpus=[0], partition=fraction(0.5, 11000, mps=False), tmp=tmp_path))
    assert isinstance(off, GpuGrant) and off.note == "MPS is off (gpu_partitioning.mps: false)"


def test_mig_jobs_get_a_mig_device_or_are_refused_with_the_reason(tmp_path: Path) -> None:
    s = shares_for([mig_a100("GPU-m", layout=["3g.20gb", "2g.10gb", "2g.10gb"])], tmp_path)
    s.apply(MigOrder(layout=["3g.20gb", "2g.10gb", "2g.10gb"]))
    mig = Partition(kind="mig", mig_profile="2g.10gb", memory_limit_mib=10240)
    g1 = s.grant(("a", 1, 0), assignment("a", gpus=[0], partition=mig, tmp=tmp_path))
    g2 = s.grant(("b", 1, 0), assignment("b", gpus=[0], partition=mig, tmp=tmp_path))
    assert isinstance(g1, GpuGrant) and isinstance(g2, GpuGrant) and g1.isolation == "mig"
    assert g1.env["CUDA_VISIBLE_DEVICES"].startswith("MIG-") and g1.env != g2.env
    assert g1.given_share == pytest.approx(2 / 7) and g1.memory_limit_mib == 9856
    third = s.grant(("c", 1, 0), assignment("c", gpus=[0], partition=mig, tmp=tmp_path))
    assert third == Refusal("no 2g.10gb MIG device for it: every 2g.10gb MIG device of GPU 0 is in use")
    whole = s.grant(("w", 1, 0), assignment("w", gpus=[0, 1], tmp=tmp_path))
    assert whole == GpuGrant({"CUDA_VISIBLE_DEVICES": "0,1"}, "whole", given_share=2.0)


def test_the_runner_refuses_what_it_cannot_give_and_reports_isolation(tmp_path: Path) -> None:
    s = shares_for([FakeGpu(uuid="GPU-z")], tmp_path)  # no MIG on an A10G
    runner = JobRunner(work_dir=tmp_path / "work", clock=FakeClock(), shares=s)
    frac = assignment("f", gpus=[0], partition=fraction(0.5, 11000), tmp=tmp_path)
    mig = assignment("m", gpus=[0], partition=Partition(kind="mig", mig_profile="1g.5gb"), tmp=tmp_path)
    try:
        runner.reconcile([frac, mig])
        st = {x.job_id: x for x in runner.statuses()}
        assert (
            st["m"].status == "refused"
            and st["m"].message == "no 1g.5gb MIG device for it: GPU 0 (NVIDIA A10G) has no MIG mode"
        )
        assert st["f"].status == "running" and st["f"].isolation == "mps" and st["f"].isolation_note is None
        assert ("m", 1, 0) not in runner.procs
        runner.reconcile([frac])  # the controller requeued m: nothing of it is kept
        assert [x.job_id for x in runner.statuses()] == ["f"]
    finally:
        runner.stop_all()
        s.mps.stop_all()


def test_over_the_memory_share_a_warning_then_a_stop_with_the_reason(tmp_path: Path) -> None:
    clock = FakeClock()
    s = shares_for([FakeGpu(uuid="GPU-z")], tmp_path)
    runner = JobRunner(work_dir=tmp_path / "work", clock=clock, shares=s)
    runner.reconcile([assignment("f", gpus=[0], partition=fraction(0.5, 11000, grace_samples=2), tmp=tmp_path)])
    proc = runner.procs[("f", 1, 0)]
    gpu = FakeGpu(uuid="GPU-z", processes=[FakeProcess(proc.popen.pid, 12000 * MIB, sm_util=80)])
    tel = GpuTelemetry(make_nvml([gpu]), pgid_of=lambda pid: pid)
    guard = MemoryGuard(clock.now)
    try:
        verdicts = []
        for _ in range(3):
            sample = tel.sample([JobGroup("f", 1, 0, proc.popen.pid, (0,))])
            annotate(sample, runner.grants())
            verdicts.append(guard.check(sample, runner.grants()))
        job = sample["jobs"][0]
        assert (job["isolation"], job["given_share"], job["used_share"], job["memory_limit_mib"]) == ("mps", 0.5,
                                                                                                      0.8, 11000)  # fmt: skip
        (warn,), [] = verdicts[0]
        assert warn.kind == "job.gpu_memory_over" and warn.level == "warning"
        assert warn.message == ("f node 0 holds 12000 MiB of GPU memory, over its 11000 MiB share (0.5 of GPU 0); "
                                "stopped after 2 samples over")  # fmt: skip
        (stopped,), (stop,) = verdicts[1]
        assert stopped.kind == "job.gpu_memory_stopped" and stop.key == ("f", 1, 0)
        assert verdicts[2] == ([], [])  # asked once
        runner.stop_for(stop.key, stop.reason)
        deadline = time.monotonic() + 10
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        (st,) = runner.statuses()
        assert st.status == "exited" and st.message == (
            "it holds 12000 MiB of GPU memory, over its 11000 MiB share (0.5 of GPU 0) for 2 samples in a row; "
            "ask for a larger gpu_fraction or use less memory")  # fmt: skip
    finally:
        runner.stop_all()
        s.mps.stop_all()


def test_warn_only_never_stops_and_whole_gpu_memory_is_never_held_against_a_share() -> None:
    guard = MemoryGuard(lambda: T0)
    grant = GpuGrant({}, "time-sliced", given_share=0.5, memory_limit_mib=1000, gpu_index=0, on_memory_over="warn",
                     grace_samples=1)  # fmt: skip
    over = {"jobs": [{"job_id": "a", "attempt": 1, "node_rank": 0, "memory_used_mib": 5000,
                      "memory_source": "processes"}]}  # fmt: skip
    events, stops = guard.check(over, {("a", 1, 0): grant})
    assert stops == [] and [e.kind for e in events] == ["job.gpu_memory_over"]
    assert "warning only" in events[0].message
    assert guard.check(over, {("a", 1, 0): grant}) == ([], [])  # one warning per stretch over
    hidden = {"jobs": [{**over["jobs"][0], "memory_source": "gpus"}]}
    stopper = GpuGrant({}, "time-sliced", given_share=0.5, memory_limit_mib=1000, gpu_index=0, grace_samples=1,
                       on_memory_over="stop")  # fmt: skip
    assert MemoryGuard(lambda: T0).check(hidden, {("a", 1, 0): stopper}) == ([], [])
