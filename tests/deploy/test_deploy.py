"""deploy/: the container image and the systemd unit say what an operator relies on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dockerfile_is_multi_stage_non_root_with_a_healthcheck() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2 and "COPY --from=build" in text
    user = [line for line in text.splitlines() if line.startswith("USER ")]
    assert user and user[-1].split()[1].split(":")[0] not in ("root", "0")
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert 'ENTRYPOINT ["spotfleet", "up"]' in text
    for path in ("pyproject.toml", "spotfleet", "providers", "policies"):  # what the build copies exists
        assert (ROOT / path).exists()


def test_systemd_unit_restarts_stops_cleanly_and_is_hardened() -> None:
    unit = ROOT / "deploy" / "spotfleet.service"
    keys = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys.setdefault(k, v)
    assert keys["Restart"] == "always" and keys["KillSignal"] == "SIGINT" and keys["User"] == "spotfleet"
    for hardening in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "CapabilityBoundingSet",
                      "RestrictAddressFamilies", "SystemCallFilter"):  # fmt: skip
        assert hardening in keys, hardening
    assert keys["ProtectSystem"] == "strict" and keys["ReadWritePaths"] == "/var/lib/spotfleet"
    if shutil.which("systemd-analyze"):
        out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
        problems = [ln for ln in out.stderr.splitlines() if "is not executable" not in ln and ln.strip()]
        assert problems == [], problems  # only the install path may be missing on a build machine


def test_the_readmes_replica_config_is_a_valid_config(tmp_path: Path) -> None:
    """The "Deploying" section's replica.yaml loads as written (database, API, HA)."""
    from spotfleet.config import load_config

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Deploying") :]
    block = section[section.index("```yaml") + len("```yaml") : section.index("```", section.index("```yaml") + 7)]
    path = tmp_path / "replica.yaml"
    path.write_text(block)
    config = load_config(path, overrides={"api.token": "a-token-long-enough-for-0.0.0.0"})
    assert config.database_url.startswith("postgresql")
    assert config.api.advertise_url is not None and config.api.advertise_url.count(",") == 2
    assert config.ha.lease_ttl.total_seconds() == 10 and config.api.workers == 2
