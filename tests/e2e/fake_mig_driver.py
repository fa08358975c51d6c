"""``fake_gpu_driver.py`` with MIG-capable A100s on A100 instances — TEST ONLY.

An instance whose type carries A100s (a2-*, p4d.*) gets A100s in MIG mode with
no devices yet (the agent lays out the configured ``mig_layouts`` through NVML,
``mig_reconfigure: true``); any other gets the plain fake GPUs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: tests.*

from tests.agent.fake_nvml import make_nvml, mig_a100

_spec = json.loads(Path("instance.json").read_text()) if Path("instance.json").exists() else {}
if str(_spec.get("instance_type", "")).startswith(("a2-", "p4d.")):
    _pid = _spec.get("provider_id", "local")
    _nvml = make_nvml([mig_a100(f"GPU-{_pid}-{i}") for i in range(int(_spec.get("gpus") or 1))])
    globals().update({k: v for k, v in vars(_nvml).items() if k.startswith(("nvml", "NVML"))})
else:
    from tests.e2e.fake_gpu_driver import *  # noqa: F403  (the plain fake GPUs)
