"""``builtin:NAME``: sample traces and workloads shipped inside the package.

So ``spotfleet simulate --traces builtin:gcp-h100 --workload builtin:fleet``
runs from a bare install, with no checkout and no reference data. The samples
and their attribution: ``spotfleet/data/traces/README.md``.

Kept free of numpy: the CLI resolves names before the simulator is imported.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from spotfleet.errors import InvalidSpec

PREFIX = "builtin:"


def _root(kind: str) -> Path:
    return Path(str(resources.files("spotfleet") / "data" / kind))


def trace_sets() -> list[str]:
    return sorted(p.name for p in _root("traces").iterdir() if p.is_dir())


def workloads() -> list[str]:
    return sorted(p.stem for p in _root("workloads").glob("*.yaml"))


def resolve_traces(arg: str) -> Path:
    """A trace directory or file; ``builtin:NAME`` is a bundled sample set."""
    if not arg.startswith(PREFIX):
        return Path(arg)
    return _pick(arg[len(PREFIX) :], trace_sets(), _root("traces"), "", field="traces")


def resolve_workload(arg: str) -> Path:
    if not arg.startswith(PREFIX):
        return Path(arg)
    return _pick(arg[len(PREFIX) :], workloads(), _root("workloads"), ".yaml", field="workload")


def _pick(name: str, known: list[str], root: Path, suffix: str, *, field: str) -> Path:
    if name not in known:
        guess = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean builtin:{guess[0]}? " if guess else ""
        raise InvalidSpec(field, f"no bundled {field} {name!r}; {hint}have: {', '.join(PREFIX + k for k in known)}")
    return root / f"{name}{suffix}"
