"""Vendor the dashboard's browser libraries from the npm registry, with their licences.

The dashboard fetches nothing from the internet at run time: every script and
stylesheet ships in the wheel under ``spotfleet/web/static/vendor``. This script
is how those files got there and how to update them: it runs ``npm pack`` for
each pinned package, checks the tarball against the registry's integrity hash,
copies the listed files byte for byte and writes ``VENDORED.json`` (version,
licence, tarball integrity, sha256 of every file) — which a test re-checks.

axe-core (the accessibility checker) is a test tool only: it goes to
``tests/web/vendor``, not into the wheel.

    python scripts/vendor_web_assets.py          # fetch, verify, copy, write manifests
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEEL = ROOT / "spotfleet" / "web" / "static" / "vendor"
TESTS = ROOT / "tests" / "web" / "vendor"

# package@version → (destination, {file in the package: name here})
PACKAGES: dict[str, tuple[Path, dict[str, str]]] = {
    "htmx.org@2.0.11": (WHEEL, {"dist/htmx.min.js": "htmx.min.js", "LICENSE": "htmx.LICENSE"}),
    "chart.js@4.6.1": (WHEEL, {"dist/chart.umd.min.js": "chart.umd.min.js", "LICENSE.md": "chart.js.LICENSE.md"}),
    "swagger-ui-dist@5.35.0": (
        WHEEL,
        {
            "swagger-ui-bundle.js": "swagger-ui-bundle.js",
            "swagger-ui.css": "swagger-ui.css",
            "swagger-ui-bundle.js.LICENSE.txt": "swagger-ui-bundle.js.LICENSE.txt",
            "LICENSE": "swagger-ui.LICENSE",
            "NOTICE": "swagger-ui.NOTICE",
        },
    ),
    "axe-core@4.14.1": (TESTS, {"axe.min.js": "axe.min.js", "LICENSE": "axe-core.LICENSE"}),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def npm(*args: str, cwd: Path) -> str:
    return subprocess.run(["npm", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def vendor(spec: str, dest: Path, files: dict[str, str], work: Path) -> dict[str, object]:
    name, version = spec.rsplit("@", 1)
    tarball = work / npm("pack", spec, "--silent", cwd=work).splitlines()[-1]
    integrity = npm("view", spec, "dist.integrity", cwd=work)
    algo, digest = integrity.split("-", 1)
    got = base64.b64encode(hashlib.new(algo, tarball.read_bytes()).digest()).decode()
    if got != digest:
        raise SystemExit(f"{spec}: tarball does not match the registry's integrity {integrity}")
    unpack = work / name.replace("/", "_")
    with tarfile.open(tarball) as tar:
        tar.extractall(unpack, filter="data")
    license_name = json.loads((unpack / "package" / "package.json").read_text()).get("license", "")
    dest.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    for inner, here in files.items():
        shutil.copyfile(unpack / "package" / inner, dest / here)
        out[here] = sha256(dest / here)
    return {"package": name, "version": version, "license": license_name, "integrity": integrity,
            "files": out}  # fmt: skip


def main() -> int:
    manifests: dict[Path, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spec, (dest, files) in PACKAGES.items():
            manifests.setdefault(dest, []).append(vendor(spec, dest, files, Path(tmp)))
            print(f"vendored {spec} → {dest.relative_to(ROOT)}")
    for dest, entries in manifests.items():
        (dest / "VENDORED.json").write_text(json.dumps(entries, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
