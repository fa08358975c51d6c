"""``spotfleet schema``: JSON Schema from the models, and docs/reference.md kept current."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml
from typer.testing import CliRunner

from spotfleet.cli.main import app
from spotfleet.reference import markdown

ROOT = Path(__file__).resolve().parents[2]


def test_reference_md_is_current() -> None:
    current = (ROOT / "docs" / "reference.md").read_text()
    assert current == markdown(), "regenerate: spotfleet schema reference > docs/reference.md"


def test_job_schema_accepts_every_example_and_rejects_a_typo() -> None:
    result = CliRunner().invoke(app, ["schema", "job"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    validator = jsonschema.Draft202012Validator(schema)
    specs = [p for p in sorted((ROOT / "examples").glob("*.yaml")) if not p.name.startswith(("workload", "config"))]
    assert len(specs) >= 4
    for path in specs:
        for doc in yaml.safe_load_all(path.read_text()):
            doc = json.loads(json.dumps(doc, default=str))  # YAML dates → strings, as on the wire
            assert not list(validator.iter_errors(doc)), path
    bad = {"name": "x", "command": "true", "resources": {"gpu": 2}}
    assert [e.validator for e in validator.iter_errors(bad)] == ["additionalProperties"]


def test_config_schema_accepts_the_cloud_example() -> None:
    schema = json.loads(CliRunner().invoke(app, ["schema", "config"]).stdout)
    doc = yaml.safe_load((ROOT / "examples" / "config-clouds.yaml").read_text())
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    aws = json.loads(CliRunner().invoke(app, ["schema", "aws"]).stdout)
    assert not list(jsonschema.Draft202012Validator(aws).iter_errors(doc["providers"]["aws"]))


def test_unknown_schema_name() -> None:
    result = CliRunner().invoke(app, ["schema", "jbo"])
    assert result.exit_code == 2 and "did you mean 'job'" in result.stderr


def test_the_readme_configuration_example_is_a_valid_config(tmp_path: Path) -> None:
    from spotfleet.config import load_config

    section = (ROOT / "README.md").read_text().split("## Configuration", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "readme.yaml"
    path.write_text(block)
    config = load_config(path)
    assert config.market_history == [] and config.budgets.tenants == {"research": 40}
