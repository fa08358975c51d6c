"""``image:`` jobs: the docker/podman argv, and the real runner driving a
stand-in runtime (a script that records what it was asked and runs the
command the way ``docker run`` would), or refusing when there is none."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

from spotfleet.agent import container
from spotfleet.agent.runner import JobRunner
from spotfleet.clock import FakeClock
from spotfleet.wire import Assignment

IMAGE = "ghcr.io/acme/train:1.2"


def test_docker_argv() -> None:
    argv = container.container_argv(
        "/usr/bin/docker", image=IMAGE, command=["python", "train.py"], name="sf-job-1-1-0",
        env_names=["SPOTFLEET_JOB_ID", "LR"], mounts=["/ckpt/job-1", "/agent/notices", "/ckpt/job-1"],
        gpu_indices=[2, 3], workdir="/workspace", uid=1000, gid=1000,
    )  # fmt: skip
    assert argv == [
        "/usr/bin/docker", "run", "--rm", "--init", "--name", "sf-job-1-1-0", "--network", "host", "--ipc", "host",
        "--user", "1000:1000", "-v", "/agent/notices:/agent/notices", "-v", "/ckpt/job-1:/ckpt/job-1",
        "-e", "LR", "-e", "SPOTFLEET_JOB_ID", "--gpus", "device=2,3", "-w", "/workspace", IMAGE, "python", "train.py",
    ]  # fmt: skip


def test_podman_argv_uses_cdi_devices_and_no_gpus_means_no_flag() -> None:
    argv = container.container_argv("/usr/bin/podman", image=IMAGE, command=["true"], name="n", env_names=[],
                                    mounts=[], gpu_indices=[0, 1], workdir=None)  # fmt: skip
    assert argv[argv.index("--device") :] == ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1", IMAGE,
                                              "true"]  # fmt: skip
    cpu = container.container_argv("/usr/bin/docker", image=IMAGE, command=["true"], name="n", env_names=[],
                                   mounts=[], gpu_indices=[], workdir=None)  # fmt: skip
    assert "--gpus" not in cpu and "--user" not in cpu


def test_runtime_choice(tmp_path: Path) -> None:
    fake = _fake_runtime(tmp_path, "podman")
    assert container.find_runtime({"PATH": str(tmp_path)}) == str(fake)
    assert container.find_runtime({"PATH": str(tmp_path), "SPOTFLEET_CONTAINER_RUNTIME": "none"}) is None
    assert container.find_runtime({"PATH": str(tmp_path), "SPOTFLEET_CONTAINER_RUNTIME": "docker"}) is None
    assert container.find_runtime({"PATH": "/nonexistent"}) is None


STAND_IN = """#!{python}
# Records its argv and the values of the -e variables, then runs what follows
# the image in the -w directory, like `docker run` (without the isolation).
import json, os, subprocess, sys
args = sys.argv[1:]
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"argv": args, "env": {{k: os.environ.get(k) for k in
        [args[i + 1] for i, a in enumerate(args) if a == "-e"]}}}}) + "\\n")
if args[0] != "run":
    sys.exit(0)
image = args.index({image!r})
workdir = args[args.index("-w") + 1] if "-w" in args[:image] else None
sys.exit(subprocess.call(args[image + 1:], cwd=workdir))
"""


def _fake_runtime(folder: Path, name: str = "docker") -> Path:
    path = folder / name
    path.write_text(STAND_IN.format(python=sys.executable, log=str(folder / "calls.jsonl"), image=IMAGE))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _wait_exit(runner: JobRunner, timeout: float = 20.0) -> int:
    (proc,) = runner.procs.values()
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        assert time.monotonic() < deadline, "the job did not exit"
        time.sleep(0.05)
    assert proc.exit_code is not None
    return proc.exit_code


def test_runner_runs_image_jobs_through_the_runtime(tmp_path: Path) -> None:
    runtime = _fake_runtime(tmp_path)
    runner = JobRunner(work_dir=tmp_path / "agent", clock=FakeClock(), container_runtime=str(runtime))
    out = tmp_path / "seen.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    a = Assignment(job_id="job-c", attempt=2, node_rank=0, name="c", command=["python3", "-c", code], image=IMAGE,
                   env={"LR": "3e-4"}, gpu_indices=[1], checkpoint_dir=str(tmp_path / "ckpt"))  # fmt: skip
    runner.reconcile([a])
    try:
        assert _wait_exit(runner) == 0
    finally:
        runner.stop_all()
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    run, cleanup = calls
    argv = run["argv"]
    assert argv[:6] == ["run", "--rm", "--init", "--name", "sf-job-c-2-0", "--network"]
    assert argv[argv.index("--gpus") + 1] == "device=1" and f"{tmp_path / 'ckpt'}:{tmp_path / 'ckpt'}" in argv
    # python stays python inside the image (not the agent's interpreter), behind the signal-ignoring shell
    assert argv[argv.index(IMAGE) + 1 :][-3:] == ["python3", "-c", code]
    assert run["env"]["LR"] == "3e-4" and run["env"]["SPOTFLEET_JOB_ID"] == "job-c"
    assert "CUDA_VISIBLE_DEVICES" not in run["env"], "inside, the GPUs are numbered from 0"
    assert cleanup["argv"] == ["rm", "-f", "sf-job-c-2-0"]
    seen = json.loads(out.read_text())
    assert seen["SPOTFLEET_CHECKPOINT_DIR"] == str(tmp_path / "ckpt")


def test_no_runtime_fails_the_attempt_and_says_why(tmp_path: Path) -> None:
    runner = JobRunner(work_dir=tmp_path / "agent", clock=FakeClock())
    runner.container_runtime = None
    a = Assignment(job_id="job-n", attempt=1, node_rank=0, name="n", command=["true"], image=IMAGE,
                   checkpoint_dir=str(tmp_path / "ckpt"))  # fmt: skip
    runner.reconcile([a])
    try:
        assert _wait_exit(runner) == container.NO_RUNTIME_EXIT
    finally:
        runner.stop_all()
    (proc,) = runner.procs.values()
    text = proc.log_path.read_text()
    assert f"asks for image {IMAGE!r} but this node has no container runtime" in text
