#!/usr/bin/env python3
"""GPU agent check: does the node agent's NVML collector see a real CUDA job and
attribute its GPU use to it?

It starts a small CUDA job as the agent's runner would — its own process group,
``CUDA_VISIBLE_DEVICES=0`` — then samples ``spotfleet.agent.telemetry.GpuTelemetry``
every ``--interval`` seconds while the job runs, and prints what the collector
attributed to that job (its PIDs, memory, its GPU's utilisation) next to the
GPU-wide figures.

The CUDA job needs nothing but the NVIDIA driver: it uses PyTorch when that is
installed, otherwise it calls the CUDA driver API (libcuda) through ctypes,
allocates ``--mem-mib`` of device memory and launches a small PTX spin kernel
in a loop. On a machine without an NVIDIA GPU/driver it prints a "no GPU" line
and exits 0.

GPU partitions (docs/gpu-partitioning.md), checked read-only:

- MIG: every GPU's MIG mode (current and pending) and its MIG devices
  (profile, UUID, memory) as the agent reads them (``partitions.MigNode.gpus``).
  Nothing is created, destroyed or switched: no MIG mode change, no reset.
- MPS: an MPS control daemon for GPU 0 in a private pipe/log directory (as the
  agent runs one per GPU), two small CUDA jobs as its clients with different
  shares (``--shares 0.25,0.5``: thread percentage and pinned-memory limit),
  sampled together; it prints what each job got (its environment, its SM time
  and memory as NVML attributed them) and stops the daemon (``quit``). Skipped
  when GPU 0 is in MIG mode; without ``nvidia-cuda-mps-control`` the two jobs
  run time-sliced and it says so.

    python bench/gpu_agent_check.py [--seconds 20] [--interval 1.0] [--mem-mib 1024] [--shares 0.25,0.5] [--no-mps]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PTX = rb"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 out, .param .u32 iters)
{
    .reg .pred p;
    .reg .b32 i, n;
    .reg .f32 x;
    .reg .b64 addr;
    ld.param.u64 addr, [out];
    ld.param.u32 n, [iters];
    mov.f32 x, 0f3F800000;
    mov.b32 i, 0;
LOOP:
    fma.rn.f32 x, x, 0f3F7FFFFF, 0f3A83126F;
    add.u32 i, i, 1;
    setp.lt.u32 p, i, n;
    @p bra LOOP;
    cvta.to.global.u64 addr, addr;
    st.global.f32 [addr], x;
    ret;
}
"""


# ------------------------------------------------------------ the CUDA job (child process)


def work_torch(seconds: float, mem_mib: int) -> bool:
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        return False
    if not torch.cuda.is_available():
        return False
    hold = torch.empty(mem_mib * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    a = torch.randn(4096, 4096, device="cuda")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    del hold
    return True


def work_driver_api(seconds: float, mem_mib: int) -> None:
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(code: int, what: str) -> None:
        if code != 0:
            raise SystemExit(f"CUDA driver call {what} failed with error {code}")

    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"spin"), "cuModuleGetFunction")
    hold, out = ctypes.c_uint64(), ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(hold), ctypes.c_size_t(mem_mib * 1024 * 1024)), "cuMemAlloc")
    check(cuda.cuMemAlloc_v2(ctypes.byref(out), ctypes.c_size_t(4)), "cuMemAlloc")
    iters = ctypes.c_uint32(200_000)
    params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(out), ctypes.c_void_p),
                                   ctypes.cast(ctypes.byref(iters), ctypes.c_void_p))  # fmt: skip
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check(cuda.cuLaunchKernel(fn, 2048, 1, 1, 256, 1, 1, 0, None, params, None), "cuLaunchKernel")
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")


def worker(seconds: float, mem_mib: int) -> int:
    if not work_torch(seconds, mem_mib):
        work_driver_api(seconds, mem_mib)
    return 0


# ------------------------------------------------------------ the check (parent)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--mem-mib", type=int, default=1024)
    p.add_argument("--shares", default="0.25,0.5", help="GPU shares of the two MPS jobs")
    p.add_argument("--no-mps", action="store_true", help="skip the MPS part")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.seconds, args.mem_mib)

    from spotfleet.agent.telemetry import GpuTelemetry, JobGroup

    tel = GpuTelemetry()
    first = tel.sample()
    if not first["nvml"]["available"] or not first.get("gpus"):
        reason = first["nvml"].get("reason") or "NVML reports 0 GPUs"
        print(f"no GPU: {reason} — nothing to check on this machine")
        print(json.dumps({"bench": "gpu_agent_check", "gpu": False, "reason": reason}))
        return 0

    gpu0 = first["gpus"][0]
    print(f"GPU 0: {gpu0['name']} ({gpu0['memory_total_mib']:.0f} MiB), driver {first['nvml']['driver']}")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seconds", str(args.seconds),
           "--mem-mib", str(args.mem_mib)]  # fmt: skip
    job = subprocess.Popen(cmd, env=env, start_new_session=True)  # its own process group, as the runner does
    group = JobGroup("bench-job", 1, 0, job.pid, (0,))
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        while job.poll() is None:
            time.sleep(args.interval)
            sample = tel.sample([group])
            g = sample["gpus"][0]
            j = sample["jobs"][0]
            others = [pr["pid"] for pr in g["processes"] if pr["job_id"] is None]
            rows.append({"t": round(time.monotonic() - started, 1), "gpu_util": g["utilization_pct"],
                         "gpu_mem_mib": g["memory_used_mib"], "job_util": j["utilization_pct"],
                         "job_mem_mib": j["memory_used_mib"], "job_pids": j["pids"], "other_pids": others,
                         "power_w": g["power_w"], "temp_c": g["temperature_c"]})  # fmt: skip
    except KeyboardInterrupt:
        os.killpg(job.pid, signal.SIGKILL)
    code = job.wait()
    tel.close()

    print(
        f"{'t(s)':>5} {'GPU%':>5} {'GPU MiB':>8} {'JOB%':>5} {'JOB MiB':>8} {'W':>6} {'°C':>4}  job pids / other pids"
    )
    for r in rows:
        print(f"{r['t']:>5} {_n(r['gpu_util']):>5} {_n(r['gpu_mem_mib']):>8} {_n(r['job_util']):>5} "
              f"{_n(r['job_mem_mib']):>8} {_n(r['power_w']):>6} {_n(r['temp_c']):>4}  {r['job_pids']} / {r['other_pids']}")  # fmt: skip
    attributed = [r for r in rows if r["job_pids"]]
    utils = [r["job_util"] for r in rows if r["job_util"] is not None]
    summary = {
        "bench": "gpu_agent_check", "gpu": True, "gpu_name": gpu0["name"], "driver": first["nvml"]["driver"],
        "job_exit_code": code, "samples": len(rows), "samples_with_job_pids": len(attributed),
        "peak_job_memory_mib": max((r["job_mem_mib"] or 0 for r in rows), default=0),
        "mean_job_utilization_pct": round(sum(utils) / len(utils), 1) if utils else None,
        "pid_attribution": bool(attributed),
    }  # fmt: skip
    print(f"attributed to bench-job: {len(attributed)}/{len(rows)} samples with its PIDs, peak "
          f"{summary['peak_job_memory_mib']:.0f} MiB, mean utilisation {summary['mean_job_utilization_pct']}%")  # fmt: skip
    tel = GpuTelemetry()
    tel.sample()
    summary["mig"] = mig_listing(tel)
    if not args.no_mps:
        summary["mps"] = mps_check(args, tel, gpu0)
    tel.close()
    print(json.dumps(summary))
    return 0 if code == 0 else 1


def mig_listing(tel: Any) -> list[dict[str, Any]]:
    """Every GPU's MIG mode and devices, read-only (what the agent's MigNode sees)."""
    from spotfleet.agent.partitions import MigNode
    from spotfleet.model.partition import layout_text

    gpus = MigNode(tel.nvml, now=lambda: datetime.now(UTC)).gpus()
    print(f"{'GPU':>3} {'MIG mode':<9} {'pending':<8} {'devices'}")
    out = []
    for g in gpus:
        mode = "n/a" if g.enabled is None else ("on" if g.enabled else "off")
        pending = "-" if g.pending is None else ("on" if g.pending else "off")
        layout = layout_text(g.layout) if g.devices else "-"
        print(f"{g.index:>3} {mode:<9} {pending:<8} {layout}")
        for d in g.devices:
            print(
                f"      MIG device {d.index}: {d.profile or '?'} {d.uuid} {d.memory_mib:.0f} MiB{' (busy)' if d.busy else ''}"
            )
        out.append({"gpu": g.index, "mig_mode": mode, "pending": pending,
                    "devices": [{"profile": d.profile, "uuid": d.uuid, "memory_mib": d.memory_mib} for d in g.devices]})  # fmt: skip
    return out


def mps_check(args: argparse.Namespace, tel: Any, gpu0: dict[str, Any]) -> dict[str, Any]:
    """Two CUDA jobs as MPS clients of one daemon for GPU 0, with different shares."""
    from spotfleet.agent.mps import MpsDaemon, MpsDaemons, client_env
    from spotfleet.agent.telemetry import JobGroup

    if (gpu0.get("mig") or {}).get("enabled"):
        print("MPS: GPU 0 is in MIG mode; skipped (MPS clients there need a MIG device)")
        return {"skipped": "GPU 0 in MIG mode"}
    shares = [float(x) for x in args.shares.split(",")][:2]
    total_mib = gpu0["memory_total_mib"] or 0.0
    root = Path(tempfile.mkdtemp(prefix="spotfleet-mps-check-"))
    daemons = MpsDaemons(root=root)
    daemon = daemons.ensure(0, gpu0["uuid"] or "0")
    mode = "mps" if isinstance(daemon, MpsDaemon) else "time-sliced"
    print(
        f"MPS: {'daemon for GPU 0 in ' + str(root) if isinstance(daemon, MpsDaemon) else 'unavailable: ' + str(daemon)}"
    )
    jobs: list[tuple[float, subprocess.Popen[bytes], dict[str, str]]] = []
    try:
        for share in shares:
            limit = share * total_mib
            extra = (client_env(daemon, fraction=share, memory_limit_mib=limit) if isinstance(daemon, MpsDaemon)
                     else {"CUDA_VISIBLE_DEVICES": "0"})  # fmt: skip
            mem = min(args.mem_mib, int(limit * 0.8)) if limit else args.mem_mib
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seconds", str(args.seconds),
                   "--mem-mib", str(mem)]  # fmt: skip
            jobs.append((share, subprocess.Popen(cmd, env={**os.environ, **extra}, start_new_session=True), extra))
        groups = [JobGroup(f"share-{s:g}", 1, 0, p.pid, (0,)) for s, p, _ in jobs]
        seen: dict[str, dict[str, list[float]]] = {g.job_id: {"sm": [], "mem": []} for g in groups}
        while any(p.poll() is None for _, p, _ in jobs):
            time.sleep(args.interval)
            for j in tel.sample(groups).get("jobs", []):
                if j.get("sm_util_pct") is not None:
                    seen[j["job_id"]]["sm"].append(j["sm_util_pct"])
                if j.get("memory_used_mib") is not None and j.get("memory_source") == "processes":
                    seen[j["job_id"]]["mem"].append(j["memory_used_mib"])
    finally:
        for _, p, _ in jobs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        daemons.stop_all()
    print(f"{'share':>6} {'threads%':>8} {'mem limit':>10} {'SM used%':>8} {'peak MiB':>8} exit")
    results = []
    for (share, p, extra), g in zip(jobs, groups, strict=True):
        sm, mem = seen[g.job_id]["sm"], seen[g.job_id]["mem"]
        r = {"share": share, "isolation": mode, "thread_pct": extra.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
             "mem_limit": extra.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
             "mean_sm_pct": round(sum(sm) / len(sm), 1) if sm else None, "peak_mib": max(mem) if mem else None,
             "exit_code": p.returncode}  # fmt: skip
        results.append(r)
        print(f"{share:>6g} {r['thread_pct'] or '-':>8} {r['mem_limit'] or '-':>10} {_n(r['mean_sm_pct']):>8} "
              f"{_n(r['peak_mib']):>8} {p.returncode}")  # fmt: skip
    return {"mode": mode, "jobs": results}


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


if __name__ == "__main__":
    sys.exit(main())
