"""Read the terraform modules with python-hcl2, as plain data the tests can query.

These tests read the HCL itself, so they also run where no terraform binary is
installed (``test_terraform_cli.py`` and ``test_terraform_apply_moto.py`` run the
real binary): literal values come back as Python values, expressions as their source text
(``"${var.cluster}"``). Helpers resolve the one kind of indirection the modules
use on purpose, a whole-value ``${local.NAME}`` reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import hcl2

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
MODULES = {"aws": TERRAFORM / "modules" / "aws", "gcp": TERRAFORM / "modules" / "gcp"}
EXAMPLES = {"aws": TERRAFORM / "examples" / "aws", "gcp": TERRAFORM / "examples" / "gcp"}

_OPTIONS = hcl2.SerializationOptions(with_comments=False, explicit_blocks=False, strip_string_quotes=True)
_LOCAL_REF = re.compile(r"^\$\{local\.([A-Za-z0-9_]+)\}$")


def tf_files() -> list[Path]:
    return sorted(TERRAFORM.rglob("*.tf"))


@cache
def parse(path: Path) -> dict[str, Any]:
    with path.open() as f:
        return dict(hcl2.load(f, serialization_options=_OPTIONS))


@dataclass(frozen=True)
class Resource:
    kind: str  # "resource" or "data"
    type: str
    name: str
    body: dict[str, Any]
    file: Path

    @property
    def address(self) -> str:
        prefix = "data." if self.kind == "data" else ""
        return f"{prefix}{self.type}.{self.name}"

    def block(self, name: str) -> dict[str, Any]:
        """The single nested block ``name`` (hcl2 gives blocks as one-element lists)."""
        blocks = self.body.get(name)
        assert isinstance(blocks, list) and len(blocks) == 1, f"{self.address}: expected one {name} block"
        block = blocks[0]
        assert isinstance(block, dict)
        return block


@dataclass(frozen=True)
class Module:
    path: Path

    def files(self) -> list[Path]:
        return sorted(self.path.glob("*.tf"))

    def _blocks(self, key: str) -> Iterator[tuple[dict[str, Any], Path]]:
        for f in self.files():
            for item in parse(f).get(key, []):
                yield item, f

    def resources(self, type_: str | None = None, *, kind: str = "resource") -> list[Resource]:
        found = []
        for item, f in self._blocks(kind):
            for rtype, named in item.items():
                for name, body in named.items():
                    if type_ is None or rtype == type_:
                        found.append(Resource(kind, rtype, name, body, f))
        return found

    def resource(self, type_: str, name: str, *, kind: str = "resource") -> Resource:
        for r in self.resources(type_, kind=kind):
            if r.name == name:
                return r
        raise AssertionError(f"{self.path.name}: no {kind} {type_}.{name}")

    @property
    def locals(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for item, _ in self._blocks("locals"):
            merged.update(item)
        return merged

    @property
    def variables(self) -> dict[str, dict[str, Any]]:
        return {name: body for item, _ in self._blocks("variable") for name, body in item.items()}

    @property
    def outputs(self) -> dict[str, dict[str, Any]]:
        return {name: body for item, _ in self._blocks("output") for name, body in item.items()}

    @property
    def terraform(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for item, _ in self._blocks("terraform"):
            merged.update(item)
        return merged

    def resolve(self, value: Any) -> Any:
        """``value``, or what a whole-value ``${local.NAME}`` reference points at."""
        while isinstance(value, str) and (m := _LOCAL_REF.match(value)):
            value = self.locals[m.group(1)]
        return value


def module(name: str) -> Module:
    return Module(MODULES[name])


def example(name: str) -> Module:
    return Module(EXAMPLES[name])


def unwrap(expr: str) -> str:
    """The expression inside ``${...}``."""
    assert expr.startswith("${") and expr.endswith("}"), expr
    return expr[2:-1]


def call_arguments(expr: str, function: str) -> dict[str, str]:
    """The ``key = value`` pairs of the object literal passed to ``function(..., {...})``."""
    start = expr.index(f"{function}(")
    open_brace = expr.index(", {", start) + 2  # the object argument, not a "${...}" in the path
    depth = 0
    for i in range(open_brace, len(expr)):
        depth += {"{": 1, "}": -1}.get(expr[i], 0)
        if depth == 0:
            body = expr[open_brace + 1 : i]
            break
    else:
        raise AssertionError(f"unbalanced object in {expr}")
    pairs = {}
    for part in _split_top_level(body):
        key, _, value = part.partition("=")
        pairs[key.strip()] = value.strip()
    return pairs


def _split_top_level(text: str) -> list[str]:
    parts, depth, current, quoted = [], 0, "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if not quoted:
            depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if (ch == "," or ch == "\n") and depth == 0 and not quoted:
            if current.strip():
                parts.append(current)
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current)
    return parts


def for_object_keys(expr: str) -> set[str]:
    """Keys of the object a ``{for k, v in {...} : k => v if ...}`` expression filters."""
    inner = expr[expr.index(" in {") + len(" in {") : expr.rindex("} :")]
    return {part.partition("=")[0].strip() for part in _split_top_level(inner)}
