"""The README's five-minute tour, run as written, and every job spec in
examples/, on the local provider with the core install only (no extras).

The tour's commands are read from README.md (the ```bash block under "A
five-minute tour"): `spotfleet up` is started as a real process, every other
line runs as a real `spotfleet` process against it, with JOB_ID the first
submitted job and INSTANCE_ID the instance it runs on. Then the remaining
examples are submitted and must all succeed.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_local_e2e import free_port
from tests.e2e.test_up import wait_healthy
from tests.test_slim_core import ROOT, slim_env

pytestmark = pytest.mark.e2e


def tour_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## A five-minute tour") :]
    block = section[section.index("```bash") + len("```bash") : section.index("```", section.index("```bash") + 7)]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("spotfleet ")]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    port = free_port()
    config = tmp_path / "fast.yaml"
    config.write_text("reconcile: {interval: 0.3s, idle_ttl: 2s, heartbeat: 0.3s}\n"
                      "providers: {local: {heartbeat: 0.3s, max_instances: 8}}\n")  # fmt: skip
    env = slim_env(SPOTFLEET_DATA_DIR=str(tmp_path / "data"), SPOTFLEET_API=f"http://127.0.0.1:{port}", COLUMNS="200")
    up = tour_commands()[0]
    assert up == "spotfleet up", "the tour starts the controller"
    proc = subprocess.Popen([sys.executable, "-m", "spotfleet.cli", "up", "--config", str(config), "--port", str(port)],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        wait_healthy(env["SPOTFLEET_API"], proc)
        yield env["SPOTFLEET_API"], env
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        # stop whatever local instances a failed run left behind (a passing run ends with `down`)
        from spotfleet.providers.local import LocalProvider

        LocalProvider(state_dir=Path(env["SPOTFLEET_DATA_DIR"]) / "local-instances").stop_all()


def cli(env: dict[str, str], line: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(line)
    assert argv[0] == "spotfleet"
    return subprocess.run([sys.executable, "-m", "spotfleet.cli", *argv[1:]], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def test_readme_tour_and_every_example(controller: tuple[str, dict[str, str]]) -> None:
    url, env = controller
    api = httpx.Client(base_url=url, timeout=10)
    job_id = instance_id = ""
    seen: dict[str, str] = {}
    for line in tour_commands()[1:]:
        if line.startswith("spotfleet jobs") and not job_id:
            # a user reads `jobs` a moment after submitting: wait until the spot job has reported a step
            def spot_job_progressing() -> bool:
                jobs = {j["name"]: j for j in api.get("/v1/jobs").json()}
                job = jobs.get("sweep-lr-3e-4") or {}
                return job.get("state") == "running" and bool((job.get("progress") or {}).get("step"))

            wait_for("the spot job's first progress report", spot_job_progressing)
        if "JOB_ID" in line or "INSTANCE_ID" in line:
            if not job_id:
                job_id = next(j["id"] for j in api.get("/v1/jobs").json() if j["name"] == "sweep-lr-3e-4")
                wait_for("the spot job running", lambda j=job_id: api.get(f"/v1/jobs/{j}").json()["state"] == "running")
                instance_id = api.get(f"/v1/jobs/{job_id}").json()["instances"][0]
            line = line.replace("JOB_ID", job_id).replace("INSTANCE_ID", instance_id)
        result = cli(env, line)
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        assert result.stdout.strip(), f"{line} printed nothing"
        assert "Traceback" not in result.stderr, line
        seen[line.split("#")[0].strip()] = result.stdout

    submitted = seen["spotfleet submit examples/train-spot.yaml examples/eval-critical.yaml"]
    assert submitted.count("submitted job-") == 2
    assert "fleet by provider / market / zone" in seen["spotfleet status"]
    assert job_id in seen["spotfleet jobs"], "whole ids when piped"
    assert re.search(r"\d+/300 \d+%", seen["spotfleet jobs"]), "the progress column"
    assert seen["spotfleet job " + job_id].splitlines()[1].split() == ["id", job_id]
    as_json = json.loads(seen["spotfleet jobs -o json"])
    assert {j["name"] for j in as_json} == {"sweep-lr-3e-4", "eval-release-candidate"}
    assert "spot notice on" in seen[f"spotfleet local interrupt {instance_id} --notice 30"]
    assert "spent" in seen["spotfleet cost report --by tenant --by market"]
    assert f"cancel requested for {job_id}" in seen[f"spotfleet cancel {job_id}"]
    assert "fleet is down" in seen["spotfleet down --yes"]
    assert api.get("/v1/instances").json() == [], "down gave every instance back"
    eval_job = next(j for j in api.get("/v1/jobs").json() if j["name"] == "eval-release-candidate")
    assert eval_job["state"] in ("succeeded", "pending"), eval_job  # finished, or drained by `down` with a checkpoint

    # the fleet is held: resume, then every example spec (the tour's and the rest) must run to success
    assert cli(env, "spotfleet resume").returncode == 0
    # shared-gpu.yaml needs a GPU driver (MIG, MPS): it runs with the test stand-ins in test_shared_gpu_example.py
    others = sorted(p for p in (ROOT / "examples").glob("*.yaml")
                    if not p.name.startswith(("workload", "config", "shared-gpu")))  # fmt: skip
    result = cli(env, "spotfleet submit -o json " + " ".join(str(p.relative_to(ROOT)) for p in others))
    assert result.returncode == 0, result.stderr
    ids = [j["id"] for j in json.loads(result.stdout)]
    assert len(ids) == len(others) >= 4

    def finished() -> bool:
        states: list[Any] = [api.get(f"/v1/jobs/{i}").json()["state"] for i in ids]
        assert "failed" not in states, states
        return all(s == "succeeded" for s in states)

    wait_for("every example to succeed", finished, timeout=240)
    follow = cli(env, f"spotfleet logs {ids[0]} --follow")
    assert follow.returncode == 0 and "done:" in follow.stdout
    report = json.loads(cli(env, "spotfleet cost report -o json").stdout)["totals"]
    assert report["failed_attempts_cost"] == 0.0 and report["cost"] > 0
    assert cli(env, "spotfleet down --yes -o json").returncode == 0
    assert api.get("/v1/instances").json() == []
