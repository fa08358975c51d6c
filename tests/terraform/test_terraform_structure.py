"""Every .tf file parses; providers are pinned; variables and outputs are documented."""

from __future__ import annotations

import re

import pytest

from tests.terraform.hcl import EXAMPLES, MODULES, Module, parse, tf_files

ALL_MODULES = {**{f"modules/{k}": Module(v) for k, v in MODULES.items()},
               **{f"examples/{k}": Module(v) for k, v in EXAMPLES.items()}}  # fmt: skip
# "~> 5.80": at least 5.80, below 6.0 (a pessimistic constraint on major.minor).
PESSIMISTIC_MINOR = re.compile(r"^~> \d+\.\d+$")


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
            # Admit current releases of the same major version (an exact pin keeps
            # `terraform init` from using a newer mirrored or cached provider); the
            # root's .terraform.lock.hcl records the version actually used.
            bounded = PESSIMISTIC_MINOR.match(version) or (">=" in version and "<" in version)
            assert bounded, f"{name}: constrain {provider} as '~> X.Y' or '>= A, < B', got {version!r}"
            assert "=" not in version.replace(">=", ""), f"{name}: no exact pin of {provider}"


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


# Longest cluster name each module's validation allows, and the cloud's limit on derived names.
NAME_LIMITS = {
    "aws": (41, {"aws_cloudwatch_event_rule": 64, "aws_iam_role": 64, "aws_iam_instance_profile": 128,
                 "aws_sqs_queue": 80, "aws_launch_template": 128, "aws_security_group": 255}),
    "gcp": (24, {"google_compute_firewall": 63, "google_compute_instance": 63, "google_compute_address": 63}),
}  # fmt: skip


@pytest.mark.parametrize("cloud", sorted(MODULES))
def test_derived_names_fit_the_clouds_limits_for_the_longest_cluster(cloud: str) -> None:
    longest, limits = NAME_LIMITS[cloud]
    module = Module(MODULES[cloud])
    condition = module.variables["cluster"]["validation"][0]["condition"]
    assert f"{{0,{longest - 1}}}" in condition, "keep NAME_LIMITS in step with the cluster validation"
    cluster = "c" * longest
    local_name = f"spotfleet-{cluster}"
    keys = {"aws": lambda: module.locals["event_patterns"], "gcp": lambda: {}}[cloud]()
    checked = 0
    for r in module.resources():
        if r.type not in limits:
            continue
        name = r.body.get("name") or r.body.get("name_prefix")
        assert isinstance(name, str), r.address
        names = [name.replace("${local.name}", local_name).replace("${var.cluster}", cluster)]
        if "${each.key}" in name:
            names = [names[0].replace("${each.key}", key) for key in keys]
        for final in names:
            assert "${" not in final, f"{r.address}: cannot evaluate {name}"
            assert len(final) <= limits[r.type], f"{r.address}: {final} is {len(final)} > {limits[r.type]}"
            checked += 1
    assert checked >= 5
    if cloud == "gcp":
        prefix = module.resource("google_compute_instance_template", "worker").body["name_prefix"]
        # The google provider takes name_prefix up to 54 characters.
        assert len(prefix.replace("${local.name}", local_name)) <= 54
