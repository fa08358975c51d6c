"""Everything the dashboard loads ships in the package, byte for byte as vendored."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "spotfleet" / "web"
MANIFESTS = [WEB / "static" / "vendor" / "VENDORED.json", ROOT / "tests" / "web" / "vendor" / "VENDORED.json"]


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.parent.relative_to(ROOT).as_posix())
def test_vendored_files_are_the_registry_s_with_their_licences(manifest: Path) -> None:
    """Re-vendor with scripts/vendor_web_assets.py; never edit these files by hand."""
    entries = json.loads(manifest.read_text())
    assert entries
    for entry in entries:
        files = entry["files"]
        assert entry["license"] and entry["integrity"].startswith("sha512-")
        assert any("LICENSE" in name for name in files), f"{entry['package']} ships with its licence"
        for name, digest in files.items():
            assert hashlib.sha256((manifest.parent / name).read_bytes()).hexdigest() == digest, name


def test_every_asset_a_template_names_exists() -> None:
    named = set()
    for template in (WEB / "templates").glob("*.html"):
        named |= set(re.findall(r"""/static/([\w./-]+?)(?:\?[^"']*)?["']""", template.read_text()))
    assert {"vendor/htmx.min.js", "vendor/chart.umd.min.js", "dashboard.js", "app.css"} <= named
    for rel in named:
        assert (WEB / "static" / rel).is_file(), rel
    for template in (WEB / "templates").glob("*.html"):
        assert not re.search(r"""(src|href)=["']https?://""", template.read_text()), (
            f"{template.name} loads from elsewhere"
        )


def test_the_wheel_carries_templates_and_static_files(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)  # fmt: skip
    (wheel,) = tmp_path.glob("spotfleet-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        p.relative_to(ROOT).as_posix()
        for p in WEB.rglob("*")
        if p.is_file() and p.suffix != ".pyc" and "__pycache__" not in p.parts
    }
    assert expected - names == set()
