"""Job specs: valid ones load; each kind of bad input is one line naming the field."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from spotfleet.errors import InvalidSpec
from spotfleet.model.spec import JobSpec, Priority, load_specs

GOOD = """
name: train-resnet
tenant: vision
command: python train.py --epochs 3
resources: {gpus: 2, gpu_types: [V100, A100], gpu_memory_gib: 16}
priority: opportunistic
checkpoint: {interval: 10m, signal: USR2}
expected_duration: 2h30m
"""


def test_good_spec_loads_with_defaults_and_durations() -> None:
    (spec,) = load_specs(GOOD, source="job.yaml")
    assert spec.priority is Priority.OPPORTUNISTIC
    assert spec.resources.gpus == 2 and spec.resources.nodes == 1
    assert spec.checkpoint.interval == timedelta(minutes=10)
    assert spec.checkpoint.signal == "SIGUSR2"
    assert spec.expected_duration == timedelta(hours=2, minutes=30)
    assert spec.is_interruptible and spec.job_family == "train-resnet"
    req = spec.node_requirements()
    assert req.gpus == 2 and req.gpu_types == frozenset({"V100", "A100"})


def test_several_documents_and_lists() -> None:
    text = "name: a\ncommand: x\n---\n- {name: b, command: y}\n- {name: c, command: z}\n"
    assert [s.name for s in load_specs(text)] == ["a", "b", "c"]


def test_critical_is_not_interruptible_by_default() -> None:
    (spec,) = load_specs("name: a\ncommand: x\npriority: critical\n")
    assert not spec.is_interruptible


@pytest.mark.parametrize(
    ("text", "field", "hint"),
    [
        ("name: a\ncommand: [unclosed\n", "", "malformed YAML: line"),
        ("name: a\ncommand: x\ngpu: 2\n", "gpu", "unknown field"),
        ("name: a\ncommand: x\nresources: {gpus: -1}\n", "resources.gpus", "greater than or equal to 0"),
        ("name: a\ncommand: x\npriority: urgent\n", "priority", "'critical', 'normal' or 'opportunistic'"),
        ("name: A B\ncommand: x\n", "name", "lowercase"),
        ("command: x\n", "name", "required field is missing"),
        ("name: a\ncommand: x\ndeadline: 2026-12-03T18:00:00\n", "deadline", "timezone"),
        ("name: a\ncommand: x\ncheckpoint: {interval: soon}\n", "checkpoint.interval", "as a duration"),
        ("name: a\ncommand: x\nresources: {mig: 9g.99gb}\n", "resources.mig", "unknown MIG profile"),
        ("- 3\n", "", "must be a YAML mapping"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(text: str, field: str, hint: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        load_specs(text, source="job.yaml")
    message = str(info.value)
    assert "\n" not in message
    assert info.value.field == field
    assert message.startswith(f"job.yaml: {field + ': ' if field else ''}")
    assert hint in message


def test_the_checkpointing_docs_periodic_example_is_a_valid_checkpoint_section() -> None:
    """docs/checkpointing.md's ``checkpoint:`` example (with ``duration``) parses as written."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "checkpointing.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "duration:" in b)
    spec = JobSpec.model_validate({"name": "a", "command": "x", **yaml.safe_load(block)})
    assert spec.checkpoint.duration == timedelta(seconds=60)
    assert spec.checkpoint.interval == timedelta(minutes=30)
