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
from pathlib import Path

import pytest

from tests.terraform.tf import Workspace, require_terraform, workspace

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
