"""Run the real terraform binary on a copy of ``terraform/``, offline.

Providers come from a local filesystem mirror (no registry is reachable here):
``find_aws_mirror()`` looks for ``registry.terraform.io/hashicorp/aws/<version>/<os>_<arch>/``
under ``$SPOTFLEET_TF_PLUGIN_DIR`` and the usual plugin directories (this kind of
machine ships hashicorp/aws 5.100.0 under /opt/tf-plugins). Each workspace gets
its own CLI config (``TF_CLI_CONFIG_FILE``) naming that mirror as the only
installation source and disabling the checkpoint call, so a clean clone needs no
~/.terraformrc, and nothing is written into the repository: terraform runs in a
temporary copy laid out like the repository (``terraform/`` plus the package's
``spotfleet/templates/``, which the modules read with ``templatefile()``, and
``deploy/``, whose systemd unit the controller's boot script installs).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROVIDER = Path("registry.terraform.io") / "hashicorp" / "aws"

# Where a terraform plugin mirror usually lives (terraform's implied local mirror
# directories on Linux, then the one this kind of machine ships).
MIRROR_CANDIDATES = (
    Path.home() / ".terraform.d" / "plugins",
    Path.home() / ".local" / "share" / "terraform" / "plugins",
    Path("/usr/local/share/terraform/plugins"),
    Path("/usr/share/terraform/plugins"),
    Path("/opt/tf-plugins"),
)


def _platform() -> str:
    machine = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{platform.system().lower()}_{machine}"


def find_aws_mirror() -> Path | None:
    """The first plugin directory holding hashicorp/aws 5.x for this platform."""
    configured = os.environ.get("SPOTFLEET_TF_PLUGIN_DIR")
    candidates = [Path(configured)] if configured else list(MIRROR_CANDIDATES)
    for base in candidates:
        for version in sorted((base / PROVIDER).glob("5.*")):
            if any((version / _platform()).glob("terraform-provider-aws*")):
                return base
    return None


def mirror_versions(mirror: Path) -> list[str]:
    return sorted(p.name for p in (mirror / PROVIDER).glob("5.*"))


def require_terraform() -> tuple[str, Path]:
    """terraform on PATH and the AWS provider mirror, or skip saying which is missing."""
    binary = shutil.which("terraform")
    if binary is None:
        pytest.skip("terraform is not on PATH (install terraform >= 1.5 to run the terraform CLI tests)")
    mirror = find_aws_mirror()
    if mirror is None:
        configured = os.environ.get("SPOTFLEET_TF_PLUGIN_DIR")
        looked = [configured] if configured else [str(c) for c in MIRROR_CANDIDATES]
        pytest.skip(
            "no hashicorp/aws 5.x provider mirror found (set SPOTFLEET_TF_PLUGIN_DIR to a directory holding "
            f"{PROVIDER}/<version>/{_platform()}/terraform-provider-aws_*; looked in {', '.join(looked)})"
        )
    return binary, mirror


@dataclass
class Workspace:
    """A copy of the repository's terraform tree with its own terraform CLI config."""

    root: Path
    env: dict[str, str]

    def dir(self, relative: str) -> Path:
        return self.root / "terraform" / relative

    def run(
        self, relative: str, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["terraform", *args],
            cwd=self.dir(relative),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"terraform {' '.join(args)} in {relative} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def init(self, relative: str, *, backend: bool = False) -> None:
        self.run(relative, "init", "-input=false", "-no-color", *([] if backend else ["-backend=false"]))


def workspace(tmp: Path, mirror: Path) -> Workspace:
    shutil.copytree(ROOT / "terraform", tmp / "terraform", ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    shutil.copytree(ROOT / "spotfleet" / "templates", tmp / "spotfleet" / "templates")
    shutil.copytree(ROOT / "deploy", tmp / "deploy")
    config = tmp / "terraform.rc"
    config.write_text(
        "disable_checkpoint = true\n"
        "provider_installation {\n"
        "  filesystem_mirror {\n"
        f'    path    = "{mirror}"\n'
        '    include = ["registry.terraform.io/hashicorp/aws"]\n'
        "  }\n"
        "}\n"
    )
    env = {
        **os.environ,
        "TF_CLI_CONFIG_FILE": str(config),
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        "CHECKPOINT_DISABLE": "1",
    }
    for var in ("TF_PLUGIN_CACHE_DIR", "TF_DATA_DIR", "TF_WORKSPACE", "TF_LOG"):
        env.pop(var, None)
    return Workspace(root=tmp, env=env)
