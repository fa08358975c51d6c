"""Type-check the installed layout (``spotfleet``, ``spotfleet.providers``,
``spotfleet.policies``) with mypy --strict.

mypy maps module names to folders, and the source tree keeps ``providers/`` and
``policies/`` at the top (the product brief fixes that layout) while they import
as ``spotfleet.providers`` / ``spotfleet.policies``. So this builds a tree of
symlinks in the installed shape under build/typecheck and checks that.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / "build" / "typecheck"


def stage() -> Path:
    shutil.rmtree(STAGE, ignore_errors=True)
    pkg = STAGE / "spotfleet"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "spotfleet").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    (pkg / "providers").symlink_to(ROOT / "providers")
    (pkg / "policies").symlink_to(ROOT / "policies")
    return pkg


def main() -> int:
    pkg = stage()
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(pkg), *sys.argv[1:]]
    return subprocess.call(cmd, cwd=STAGE)


if __name__ == "__main__":
    sys.exit(main())
