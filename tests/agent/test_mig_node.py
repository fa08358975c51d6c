"""MIG on the node against the fake NVML (nvidia-ml-py's names, constants and errors):
reading layouts, creating the declared one when allowed, saying why not otherwise,
and handing each MIG job a device of its own."""

from __future__ import annotations

from datetime import UTC, datetime
from types import ModuleType

from spotfleet.agent.partitions import MigDevice, MigNode
from spotfleet.agent.telemetry import GpuTelemetry
from spotfleet.wire import MigOrder
from tests.agent.fake_nvml import FakeGpu, FakeProcess, make_nvml, mig_a100

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
SEVEN = ["1g.5gb"] * 7


def node(gpus: list[FakeGpu], *, driver: bool = True) -> tuple[MigNode, ModuleType]:
    nvml = make_nvml(gpus, driver=driver)
    return MigNode(GpuTelemetry(nvml).nvml, now=lambda: T0), nvml


def test_a_gpu_that_matches_the_layout_is_left_alone() -> None:
    mig, nvml = node([mig_a100(layout=SEVEN)])
    assert mig.apply(MigOrder(layout=SEVEN, reconfigure=True)) == []
    assert mig.unfit == {} and nvml.state["calls"] == []  # type: ignore[attr-defined]
    (gpu,) = mig.gpus()
    assert gpu.layout == tuple(SEVEN) and len({d.uuid for d in gpu.devices}) == 7


def test_a_different_layout_is_unfit_unless_reconfiguration_is_allowed() -> None:
    mig, nvml = node([mig_a100(layout=["3g.20gb", "4g.20gb"])])
    mig.apply(MigOrder(layout=SEVEN, reconfigure=False))
    assert mig.unfit == {"*": "GPU 0 has 1x4g.20gb+1x3g.20gb, the pool declares 7x1g.5gb, and "
                              "gpu_partitioning.mig_reconfigure is off"}  # fmt: skip
    assert nvml.state["calls"] == []  # type: ignore[attr-defined]  # read-only


def test_reconfiguration_destroys_and_creates_instances_through_nvml() -> None:
    mig, nvml = node([mig_a100(layout=["3g.20gb", "4g.20gb"])])
    (event,) = mig.apply(MigOrder(layout=["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], reconfigure=True))
    assert mig.unfit == {}
    assert (
        event.kind == "node.mig_reconfigured" and "1x4g.20gb+1x3g.20gb → 1x3g.20gb+1x2g.10gb+2x1g.5gb" in event.message
    )
    calls = [c[0] for c in nvml.state["calls"]]  # type: ignore[attr-defined]
    assert calls[:4] == ["nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy"] * 2
    created = [c for c in nvml.state["calls"] if c[0] == "nvmlDeviceCreateGpuInstance"]  # type: ignore[attr-defined]
    assert [c[2] for c in created] == [9, 14, 19, 19]  # profile ids of 3g.20gb, 2g.10gb, 1g.5gb: largest first
    assert calls.count("nvmlGpuInstanceCreateComputeInstance") == 4
    assert mig.gpus()[0].layout == ("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb")
    assert mig.apply(MigOrder(layout=["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], reconfigure=True)) == []


def test_mig_mode_is_never_changed_and_is_the_reason_when_off() -> None:
    mig, _ = node([mig_a100(enabled=False)])
    mig.apply(MigOrder(layout=SEVEN, reconfigure=True))
    assert "MIG mode is off on GPU 0" in mig.unfit["*"] and "nvidia-smi -i 0 -mig 1" in mig.unfit["*"]


def test_nvml_errors_become_the_unfit_reason() -> None:
    mig, _ = node([mig_a100(layout=["7g.40gb"], admin=False)])
    mig.apply(MigOrder(layout=SEVEN, reconfigure=True))
    assert mig.unfit["*"].startswith("creating MIG layout 7x1g.5gb on GPU 0 failed: NVMLError_NoPermission")


def test_no_driver_and_no_mig_mode_are_unfit() -> None:
    mig, _ = node([], driver=False)
    mig.apply(MigOrder(layout=SEVEN))
    assert mig.unfit == {"*": "no NVIDIA driver (NVML unavailable): MIG devices cannot be read"}
    mig, _ = node([FakeGpu()])  # an A10G: no MIG mode
    mig.apply(MigOrder(layout=SEVEN, reconfigure=True))
    assert mig.unfit == {"*": "GPU 0 (NVIDIA A10G) has no MIG mode"}


def test_a_busy_gpu_is_not_reconfigured_under_its_jobs() -> None:
    gpu = mig_a100(layout=["7g.40gb"])
    dev = gpu.mig[0]  # type: ignore[index]
    assert dev is not None
    dev.processes.append(FakeProcess(4242, 1024 * 1024 * 1024))
    mig, nvml = node([gpu])
    mig.apply(MigOrder(layout=SEVEN, reconfigure=True))
    assert "with jobs on it" in mig.unfit["*"] and nvml.state["calls"] == []  # type: ignore[attr-defined]


def test_each_mig_job_gets_its_own_device_and_gives_it_back() -> None:
    mig, _ = node([mig_a100("GPU-x", layout=["2g.10gb", "2g.10gb", "1g.5gb"])])
    mig.apply(MigOrder(layout=["2g.10gb", "2g.10gb", "1g.5gb"]))
    a = mig.allocate(("job-a", 1, 0), 0, "2g.10gb")
    b = mig.allocate(("job-b", 1, 0), 0, "2g.10gb")
    assert isinstance(a, MigDevice) and isinstance(b, MigDevice)
    assert a.uuid != b.uuid and a.uuid.startswith("MIG-") and a.profile == b.profile == "2g.10gb"
    assert mig.allocate(("job-a", 1, 0), 0, "2g.10gb") == a  # idempotent per job node
    assert mig.allocate(("job-c", 1, 0), 0, "2g.10gb") == "every 2g.10gb MIG device of GPU 0 is in use"
    mig.release(("job-a", 1, 0))
    c = mig.allocate(("job-c", 1, 0), 0, "2g.10gb")
    assert isinstance(c, MigDevice) and c.uuid == a.uuid
    missing = "GPU 0 has no 3g.20gb MIG device (2x2g.10gb+1x1g.5gb)"
    assert mig.allocate(("job-d", 1, 0), 0, "3g.20gb") == missing
    assert mig.report()["unfit"] == {"3g.20gb": missing}  # reported: the controller sends no 3g.20gb job here
    assert mig.report()["allocated"] == {"job-b/1/0": b.uuid, "job-c/1/0": c.uuid}
