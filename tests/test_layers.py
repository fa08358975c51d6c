"""The layering rules of ARCHITECTURE.md, checked on the source with ``ast``.

The planner is a pure function: ``controller/{plan,sync,apply,step}.py``, the
policies and the ledger's pricing (``ledger/report.py``) must not import the
store (SQL) or SQLAlchemy, directly or inside a function. And SQL lives in
``spotfleet/store/``: nothing else calls ``select(`` or opens a ``Session``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PURE = [
    *(ROOT / "spotfleet" / "controller" / f"{name}.py" for name in ("plan", "sync", "apply", "step")),
    *sorted((ROOT / "policies").rglob("*.py")),
    ROOT / "spotfleet" / "ledger" / "report.py",
]
FORBIDDEN = ("spotfleet.store", "sqlalchemy")


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_planner_policies_and_report_never_import_the_store(path: Path) -> None:
    bad = sorted(m for m in imported_modules(path) if m.split(".")[0] == "sqlalchemy" or m.startswith(FORBIDDEN))
    assert not bad, (
        f"{path.relative_to(ROOT)} imports {bad}: use the records in spotfleet.model / spotfleet.ledger.types"
    )


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from spotfleet.store.store import Store\n    import sqlalchemy.orm\n")
    assert imported_modules(sample) == {"spotfleet.store.store", "sqlalchemy.orm"}


def test_sql_lives_in_the_store_only() -> None:
    """No ``select(``, ``Session`` or ``store.session()`` outside ``spotfleet/store/``:
    every query is a ``Store`` method that returns domain records."""
    offenders = []
    for path in sorted([*(ROOT / "spotfleet").rglob("*.py"), *(ROOT / "policies").rglob("*.py")]):
        if (ROOT / "spotfleet" / "store") in path.parents:
            continue
        for module in imported_modules(path):
            if module.split(".")[0] == "sqlalchemy" or module.startswith("spotfleet.store.schema"):
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
        text = path.read_text()
        if ".session()" in text:
            offenders.append(f"{path.relative_to(ROOT)} opens a store session")
    assert not offenders, "\n".join(offenders)


def test_the_job_helper_and_the_protocol_agree_on_the_checkpointed_exit_code() -> None:
    from spotfleet import checkpoint, wire

    assert checkpoint.CHECKPOINTED_EXIT_CODE == wire.CHECKPOINTED_EXIT_CODE
    assert "pydantic" not in imported_modules(ROOT / "spotfleet" / "checkpoint.py")
