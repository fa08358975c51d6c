"""`pip install spotfleet` (the core, no extras) is enough for a node agent and
a local controller; a missing extra is one line naming what to install.

A bare install is imitated by ``tests/slim/sitecustomize.py`` on PYTHONPATH: in
that process, and in every process it starts (local instances, their agents,
their jobs), boto3, google, numpy, matplotlib and psycopg cannot be imported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLIM = ROOT / "tests" / "slim"
EXTRAS_ONLY = ("boto3", "google-cloud-compute", "numpy", "matplotlib", "psycopg")


def slim_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(SLIM), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spotfleet.cli", *args], env=env or slim_env(), capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)  # fmt: skip


def test_core_dependencies_leave_the_extras_out() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    for name in EXTRAS_ONLY:
        assert name not in core, f"{name} must be an extra"
    extras = project["optional-dependencies"]
    assert {"aws", "gcp", "postgres", "sim", "plot", "all", "dev"} <= set(extras)
    assert extras["all"] == ["spotfleet[aws,gcp,postgres,sim,plot]"] and any(
        d.startswith("spotfleet[all") for d in extras["dev"]
    )
    for required in ("apscheduler", "pydantic", "httpx", "nvidia-ml-py"):
        assert required in core


def test_the_blocker_really_blocks() -> None:
    probe = subprocess.run([sys.executable, "-c", "import numpy"], env=slim_env(), capture_output=True, text=True)
    assert probe.returncode != 0 and "not in spotfleet's core" in probe.stderr


def test_every_core_module_imports_without_the_extras() -> None:
    code = """
import importlib, pkgutil, spotfleet, spotfleet.policies, spotfleet.providers
extras_only = ("spotfleet.sim.", "spotfleet.providers.aws", "spotfleet.providers.gcp", "spotfleet.sim.provider",
               "spotfleet.ledger.plot")
for pkg in (spotfleet, spotfleet.policies, spotfleet.providers):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if m.name.endswith("__main__") or m.name.startswith(extras_only):
            continue
        importlib.import_module(m.name)
import spotfleet.sim.builtin  # resolves builtin: names before numpy is needed
print("ok")
"""
    probe = subprocess.run([sys.executable, "-c", code], env=slim_env(), capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and probe.stdout.strip() == "ok", probe.stderr


def test_the_agent_and_the_cli_start_on_the_core() -> None:
    for args in (["agent", "--help"], ["--help"], ["offerings", "--limit", "3"], ["gpus"], ["schema", "job"]):
        result = run(*args)
        assert result.returncode == 0, (args, result.stderr)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["simulate", "--traces", "builtin:gcp-h100", "--workload", "builtin:fleet"],
         "error: the simulator needs the 'sim' extra (numpy is not installed): pip install 'spotfleet[sim]'"),
        (["cost", "report", "--db", "postgresql://u@127.0.0.1/db"],
         "error: a PostgreSQL database needs the 'postgres' extra (psycopg is not installed): "
         "pip install 'spotfleet[postgres]'"),
        (["offerings", "-p", "aws", "--endpoint-url", "http://127.0.0.1:9"],
         "error: live AWS prices needs the 'aws' extra (boto3 is not installed): pip install 'spotfleet[aws]'"),
    ],
)  # fmt: skip
def test_a_missing_extra_is_one_line_and_exit_5(args: list[str], line: str) -> None:
    result = run(*args)
    assert result.returncode == 5, result.stderr
    assert result.stderr.strip().splitlines() == [line]


def test_up_with_a_cloud_provider_but_no_sdk(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("providers: {gcp: {project: my-project, zones: [us-central1-a]}}\n")
    result = run("up", "--config", str(config), "--data-dir", str(tmp_path), "--port", "0")
    assert result.returncode == 5
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: the GCP provider (providers.gcp) needs the 'gcp' extra (google is not installed): "
        "pip install 'spotfleet[gcp]'"
    ]


def test_workers_install_the_core_and_controllers_their_extras() -> None:
    from spotfleet.providers.base import AgentBootstrap
    from spotfleet.providers.bootstrap import render_bootstrap

    script = render_bootstrap(AgentBootstrap(controller_url="http://c:8478", agent_token="sf_x",
                                             spotfleet_version="1.2.3", cluster="c"), metadata_flavor="aws")  # fmt: skip
    assert re.findall(r'pip install --quiet "([^"]+)"', script) == ["spotfleet==1.2.3"]
    aws = (ROOT / "terraform/modules/aws/templates/controller-user-data.sh.tftpl").read_text()
    gcp = (ROOT / "terraform/modules/gcp/templates/controller-startup.sh.tftpl").read_text()
    assert '"spotfleet[aws,postgres]==${spotfleet_version}"' in aws
    assert '"spotfleet[gcp,postgres]==${spotfleet_version}"' in gcp


@pytest.mark.e2e
def test_the_readme_demo_runs_on_the_core(tmp_path: Path) -> None:
    """The README's first command ends in `spotfleet demo`; it needs no extra."""
    result = run("demo", env=slim_env(TMPDIR=str(tmp_path), COLUMNS="120"), timeout=200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "4 succeeded" in out and "the spot interruption of" in out
    live = re.search(r"spent so far \(live view\)\s*│\s*\$([0-9.]+)", out)
    ledger = re.search(r"dollars spent \(ledger\)\s*│\s*\$([0-9.]+)", out)
    assert live and ledger and live.group(1) == ledger.group(1), "the live view and the ledger agree at the end"
