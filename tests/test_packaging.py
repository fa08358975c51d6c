"""Every package folder is listed in pyproject, and providers/policies install
under the spotfleet namespace."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = {v: k for k, v in config["package-dir"].items()}
    found = set()
    for init in ROOT.glob("*/**/__init__.py"):
        rel = init.parent.relative_to(ROOT)
        top, *rest = rel.parts
        if top not in mapping:
            continue
        found.add(".".join([mapping[top], *rest]))
    assert found - listed == set(), f"add these to [tool.setuptools] packages: {sorted(found - listed)}"


def test_namespaced_imports() -> None:
    import spotfleet.policies.simple
    import spotfleet.providers.base

    assert spotfleet.providers.base.__file__ is not None and "providers" in spotfleet.providers.base.__file__
    assert spotfleet.policies.simple.SimplePolicy.name == "simple"
