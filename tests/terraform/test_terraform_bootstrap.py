"""The modules render the provider's own bootstrap template, with the provider's variable names."""

from __future__ import annotations

import inspect
import re
from importlib import resources
from pathlib import Path
from string import Template

import pytest

from spotfleet.providers import bootstrap
from spotfleet.providers.base import AgentBootstrap
from tests.terraform.hcl import MODULES, ROOT, call_arguments, module, unwrap

PACKAGE_TEMPLATE = Path(str(resources.files("spotfleet") / "templates" / bootstrap.TEMPLATE))
# The templatefile() call of each module's worker definition.
WORKER_SCRIPT = {
    "aws": lambda m: unwrap(m.resource("aws_launch_template", "worker").body["user_data"]),
    "gcp": lambda m: unwrap(
        m.resource("google_compute_instance_template", "worker").body["metadata"]["startup-script"]
    ),
}


def render_like_terraform(text: str, variables: dict[str, str]) -> str:
    """templatefile() for a template that only interpolates plain names (checked below)."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: variables[m.group(1)], text)


def test_the_package_template_is_also_valid_terraform_template_syntax() -> None:
    text = PACKAGE_TEMPLATE.read_text()
    # No template directives and no escapes: both engines then read it the same way.
    assert "%{" not in text and "$$" not in text
    interpolations = re.findall(r"\$\{([^}]*)\}", text)
    assert interpolations
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) for name in interpolations), interpolations


@pytest.mark.parametrize("cloud", sorted(MODULES))
def test_worker_bootstrap_is_the_package_template(cloud: str) -> None:
    m = module(cloud)
    expr = WORKER_SCRIPT[cloud](m)
    assert "templatefile(local.bootstrap_template," in expr
    path_expr = unwrap(m.locals["bootstrap_template"])
    default = re.search(r'"\$\{path\.module\}/([^"]+)"', path_expr)
    assert default, path_expr
    assert (MODULES[cloud] / default.group(1)).resolve() == PACKAGE_TEMPLATE.resolve()


@pytest.mark.parametrize("cloud", sorted(MODULES))
def test_worker_bootstrap_passes_exactly_the_variables_the_provider_renders(cloud: str) -> None:
    args = call_arguments(WORKER_SCRIPT[cloud](module(cloud)), "templatefile")
    names_in_template = set(Template(PACKAGE_TEMPLATE.read_text()).get_identifiers())
    names_rendered = set(re.findall(r"\b(\w+)=", inspect.getsource(bootstrap.render_bootstrap).split("substitute(")[1]))
    assert set(args) == names_in_template == names_rendered
    assert args["metadata_flavor"] == f'"{cloud}"'
    assert args["cluster"] == "var.cluster"
    assert args["controller_url"] == "local.controller_url"
    # Per-instance secrets come with each launch, never from terraform.
    assert args["agent_token"] == '""'


def test_rendering_agrees_with_the_provider() -> None:
    values = {"spotfleet_version": "0.1.0", "controller_url": "http://10.0.0.5:8478", "agent_token": "",
              "cluster": "prod", "metadata_flavor": "aws", "extra_env_lines": ""}  # fmt: skip
    ours = render_like_terraform(PACKAGE_TEMPLATE.read_text(), values)
    theirs = bootstrap.render_bootstrap(
        AgentBootstrap(
            controller_url="http://10.0.0.5:8478", agent_token="", spotfleet_version="0.1.0", cluster="prod"
        ),
        metadata_flavor="aws",
    )
    assert ours == theirs


@pytest.mark.parametrize(
    ("cloud", "template", "local"),
    [
        ("aws", "controller-user-data.sh.tftpl", "controller_user_data"),
        ("gcp", "controller-startup.sh.tftpl", "controller_startup"),
    ],
)
def test_controller_script_gets_every_variable_and_no_secret(cloud: str, template: str, local: str) -> None:
    m = module(cloud)
    text = (MODULES[cloud] / "templates" / template).read_text()
    args = call_arguments(unwrap(m.locals[local]), "templatefile")
    used = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text)) | set(re.findall(r"%\{ if (\w+)", text))
    assert used == set(args), f"template uses {sorted(used)}, module passes {sorted(args)}"
    # Secrets are fetched when the service starts: only their names are in the script.
    assert not {"api_token", "database_url", "token", "database"} & set(args)
    assert "spotfleet up --config /etc/spotfleet/spotfleet.yaml" in text
    assert "SPOTFLEET_API_TOKEN=" in text and "SPOTFLEET_DATABASE=" in text
    assert "systemctl enable" in text


DEPLOY_UNIT = ROOT / "deploy" / "spotfleet.service"
CONTROLLER_SCRIPT = {"aws": "controller_user_data", "gcp": "controller_startup"}


@pytest.mark.parametrize("cloud", sorted(MODULES))
def test_controller_installs_the_deploy_unit_not_one_of_its_own(cloud: str) -> None:
    """One unit: the boot script writes deploy/spotfleet.service and only overrides ExecStart
    (to read the secrets first) in a drop-in, so the hardening cannot drift between the two."""
    m = module(cloud)
    args = call_arguments(unwrap(m.locals[CONTROLLER_SCRIPT[cloud]]), "templatefile")
    path = re.fullmatch(r'chomp\(file\("\$\{path\.module\}/([^"]+)"\)\)', args["systemd_unit"])
    assert path, args["systemd_unit"]
    assert (MODULES[cloud] / path.group(1)).resolve() == DEPLOY_UNIT.resolve()
    template = next((MODULES[cloud] / "templates").glob("controller-*.sh.tftpl")).read_text()
    assert "cat > /etc/systemd/system/spotfleet.service <<'UNIT'\n${systemd_unit}\nUNIT\n" in template
    assert "[Unit]" not in template and "NoNewPrivileges" not in template, "an inline unit is back"
    dropin = re.search(r"spotfleet\.service\.d/terraform\.conf <<'DROPIN'\n(.*?)\nDROPIN\n", template, re.DOTALL)
    assert dropin, "the drop-in that points the unit at start-controller"
    settings = [line for line in dropin.group(1).splitlines() if line and not line.startswith("#")]
    assert settings[0] == "[Service]"
    assert {line.split("=", 1)[0] for line in settings[1:]} <= {"ExecStart", "Environment"}
    assert settings[-2:] == ["ExecStart=", "ExecStart=/opt/spotfleet/start-controller"]
