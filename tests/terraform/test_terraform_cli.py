"""The real terraform binary on every module and example: fmt, validate, variable rules.

``terraform validate`` type-checks every expression against the provider's schema
(python-hcl2, used by the other tests here, only parses). It runs for the AWS
module and example with hashicorp/aws from the local mirror (see ``tf.py``). The
GCP module and example get ``fmt -check`` only: no hashicorp/google provider is
mirrored on these machines and no registry is reachable, so ``terraform init``
cannot install it; they stay covered by the HCL tests and checkov.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.terraform.hcl import module, unwrap
from tests.terraform.tf import ROOT, Workspace, require_terraform, workspace

ALL_DIRS = ["modules/aws", "modules/gcp", "examples/aws", "examples/gcp"]
VALIDATED = ["modules/aws", "examples/aws"]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    _, mirror = require_terraform()
    return workspace(tmp_path_factory.mktemp("tf"), mirror)


@pytest.mark.parametrize("relative", ALL_DIRS)
def test_fmt_check(ws: Workspace, relative: str) -> None:
    proc = ws.run(relative, "fmt", "-check", "-recursive", "-diff", "-no-color", check=False)
    assert proc.returncode == 0, f"terraform fmt would change {relative}:\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize("relative", VALIDATED)
def test_validate(ws: Workspace, relative: str) -> None:
    ws.init(relative)
    proc = ws.run(relative, "validate", "-no-color", check=False)
    print(f"terraform validate ({relative}): {proc.stdout.strip()}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Success! The configuration is valid." in proc.stdout
    # The lock file records the mirrored provider the constraint admitted.
    lock = (ws.dir(relative) / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/hashicorp/aws"' in lock


# SSM parameter names: AWS's rules (at most 1011 characters of a-zA-Z0-9_.-/,
# a hierarchy fully qualified with a leading "/", no aws/ssm prefix).
VALID_NAMES = ["/spotfleet/prod/api-token", "spotfleet-api-token", "/a", "x.y_z-1", "/" + "a" * 1010]
INVALID_NAMES = [
    "",
    "has space",
    "spotfleet/prod/token",
    "/aws/reserved",
    "SSM-token",
    "/a//b",
    "/" + "a" * 1011,
    "ab$",
]

MODULE_CALL = """
module "{name}" {{
  source                 = "../modules/aws"
  cluster                = "prod"
  spotfleet_version      = "0.1.0"
  vpc_id                 = "vpc-0123456789abcdef0"
  controller_subnet_id   = "subnet-0123456789abcdef0"
  worker_subnets         = {{ "us-east-1a" = ["subnet-0aaaaaaaaaaaaaaaa"] }}
  worker_ami_id          = "ami-0123456789abcdef0"
  api_token_parameter    = {token}
  database_url_parameter = {database}
}}
"""


def test_ssm_parameter_name_validation(ws: Workspace, tmp_path: Path) -> None:
    """One root calls the module once per name (literal arguments, so `validate`
    evaluates the module's variable validations) and the errors name exactly the
    invalid ones, for both variables."""
    root = ws.dir("ssm-names")
    root.mkdir()
    calls = []
    cases: dict[str, tuple[str, str, bool]] = {}
    for i, name in enumerate(VALID_NAMES + INVALID_NAMES):
        valid = name in VALID_NAMES
        cases[f"token_{i}"] = ("api_token_parameter", name, valid)
        cases[f"db_{i}"] = ("database_url_parameter", name, valid)
        ok = json.dumps("/spotfleet/prod/ok")
        calls.append(MODULE_CALL.format(name=f"token_{i}", token=json.dumps(name), database="null"))
        calls.append(MODULE_CALL.format(name=f"db_{i}", token=ok, database=json.dumps(name)))
    (root / "main.tf").write_text("".join(calls))
    ws.init("ssm-names")
    proc = ws.run("ssm-names", "validate", "-json", "-no-color", check=False)
    report = json.loads(proc.stdout)
    rejected: dict[str, str] = {}
    lines = (root / "main.tf").read_text().splitlines()
    for diag in report["diagnostics"]:
        assert diag["summary"] == "Invalid value for variable", diag
        line = diag["range"]["start"]["line"]
        call = next(lines[n].split('"')[1] for n in range(line - 1, -1, -1) if lines[n].startswith("module "))
        rejected[call] = diag["detail"]
    for call, (variable, name, valid) in cases.items():
        if valid:
            assert call not in rejected, f"{variable}={name!r} rejected: {rejected.get(call)}"
        else:
            assert call in rejected, f"{variable}={name!r} accepted"
            assert f"{variable} must be" in rejected[call]
    assert not report["valid"] and len(rejected) == 2 * len(INVALID_NAMES)


# The controller boot script as terraform renders it: the module's own templatefile()
# expression (read from its HCL), evaluated in a provider-free root that defines the
# variables and locals it refers to.
RENDER_INPUTS = {
    "aws": ("controller_user_data", {"spotfleet_version": '"0.1.0"', "api_token_parameter": '"/sf/token"',
                                     "database_url_parameter": '"/sf/db"'}),
    "gcp": ("controller_startup", {"spotfleet_version": '"0.1.0"', "project": '"p"', "api_token_secret": '"token"',
                                   "database_url_secret": '"db"'}),
}  # fmt: skip


@pytest.mark.parametrize("cloud", sorted(RENDER_INPUTS))
def test_rendered_controller_script_installs_the_deploy_unit_verbatim(ws: Workspace, cloud: str) -> None:
    local, variables = RENDER_INPUTS[cloud]
    expr = unwrap(module(cloud).locals[local]).replace("path.module", "local.module_dir")
    root = ws.dir(f"render-{cloud}")
    root.mkdir()
    (root / "main.tf").write_text(
        "".join(f'variable "{name}" {{\n  default = {value}\n}}\n' for name, value in variables.items())
        + f'locals {{\n  module_dir = "../modules/{cloud}"\n  region = "us-east-1"\n'
        + '  controller_config = { cluster = "prod" }\n}\n'
        + f'output "script" {{\n  value = {expr}\n}}\n'
    )
    ws.init(f"render-{cloud}")
    ws.run(f"render-{cloud}", "apply", "-auto-approve", "-no-color", f"-state={root / 'tfstate'}")
    script = ws.run(f"render-{cloud}", "output", "-raw", f"-state={root / 'tfstate'}", "script").stdout
    unit = re.search(r"cat > /etc/systemd/system/spotfleet\.service <<'UNIT'\n(.*?)\nUNIT\n", script, re.DOTALL)
    assert unit, script
    deployed = (ROOT / "deploy" / "spotfleet.service").read_text()
    assert unit.group(1) + "\n" == deployed, "the controller must run deploy/spotfleet.service as it is"
    for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "SystemCallFilter=@system-service"):
        assert hardening in unit.group(1)
    assert "ExecStart=\nExecStart=/opt/spotfleet/start-controller\n" in script
    syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
