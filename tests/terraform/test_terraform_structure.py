"""Every .tf file parses; providers are pinned; variables and outputs are documented."""

from __future__ import annotations

import re

import pytest

from tests.terraform.hcl import EXAMPLES, MODULES, Module, parse, tf_files

ALL_MODULES = {**{f"modules/{k}": Module(v) for k, v in MODULES.items()},
               **{f"examples/{k}": Module(v) for k, v in EXAMPLES.items()}}  # fmt: skip
EXACT_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def test_every_tf_file_parses() -> None:
    files = tf_files()
    # Both modules and both examples, each split by concern.
    assert len(files) >= 20
    for path in files:
        assert parse(path), f"{path} parsed to nothing"


@pytest.mark.parametrize("name", sorted(ALL_MODULES))
def test_terraform_and_providers_are_constrained(name: str) -> None:
    tf = ALL_MODULES[name].terraform
    assert "<" in tf["required_version"], "terraform itself needs an upper bound"
    providers = tf["required_providers"]
    assert providers, "declare the providers used"
    for entry in providers:
        for provider, spec in entry.items():
            version = spec["version"]
            if name.startswith("examples/"):
                assert EXACT_VERSION.match(version), f"{name}: pin {provider} exactly, got {version!r}"
            else:
                assert ">=" in version and "<" in version, f"{name}: {provider} needs a bounded range, got {version!r}"


@pytest.mark.parametrize("name", sorted(ALL_MODULES))
def test_variables_have_descriptions_types_and_validation(name: str) -> None:
    variables = ALL_MODULES[name].variables
    assert variables
    for var, body in variables.items():
        assert body.get("description", "").strip(), f"{name}: variable {var} needs a description"
        assert "type" in body, f"{name}: variable {var} needs a type"
        if body["type"] not in ("bool", "${bool}"):
            assert body.get("validation"), f"{name}: variable {var} needs a validation block"


@pytest.mark.parametrize("name", sorted(ALL_MODULES))
def test_outputs_are_documented(name: str) -> None:
    outputs = ALL_MODULES[name].outputs
    assert "spotfleet_config" in outputs, "`spotfleet config from-terraform` reads this output"
    for out, body in outputs.items():
        assert body.get("description", "").strip(), f"{name}: output {out} needs a description"


@pytest.mark.parametrize("cloud", sorted(MODULES))
def test_examples_use_the_module_and_expose_its_config(cloud: str) -> None:
    example = Module(EXAMPLES[cloud])
    (call,) = [m for item in (parse(f).get("module", []) for f in example.files()) for m in item]
    assert call["spotfleet"]["source"] == f"../../modules/{cloud}"
    assert example.outputs["spotfleet_config"]["value"] == "${module.spotfleet.spotfleet_config}"


@pytest.mark.parametrize("cloud", sorted(MODULES))
def test_module_readme_covers_inputs_outputs_and_cost(cloud: str) -> None:
    module = Module(MODULES[cloud])
    readme = (MODULES[cloud] / "README.md").read_text()
    for section in ("## Inputs", "## Outputs", "## What it creates", "## What it costs"):
        assert section in readme, f"modules/{cloud}/README.md lacks {section}"
    for var in module.variables:
        assert f"`{var}`" in readme, f"modules/{cloud}/README.md does not document input {var}"
    for out in module.outputs:
        assert f"`{out}`" in readme, f"modules/{cloud}/README.md does not document output {out}"
