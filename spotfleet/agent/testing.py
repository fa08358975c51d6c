"""Test-only injection points for the agent process, read from the environment.

CI machines have no NVIDIA GPU, driver or MPS, yet the e2e tests must run the
real agent in its own process (started by the local provider) on a GPU it can
see. Two variables, read only by ``python -m spotfleet.agent``:

- ``SPOTFLEET_TEST_FAKE_NVML``: path of a Python file that stands in for
  nvidia-ml-py's ``pynvml`` (same names, constants and error types);
- ``SPOTFLEET_TEST_MPS_CONTROL``: path of a stand-in for
  ``nvidia-cuda-mps-control`` that records the commands it receives.

Each one used is logged as a warning naming the file. Nothing in production
sets them; the names say what they are for.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from types import ModuleType

log = logging.getLogger(__name__)
FAKE_NVML = "SPOTFLEET_TEST_FAKE_NVML"
MPS_CONTROL = "SPOTFLEET_TEST_MPS_CONTROL"


def fake_nvml() -> ModuleType | None:
    path = os.environ.get(FAKE_NVML)
    if not path:
        return None
    spec = importlib.util.spec_from_file_location("spotfleet_test_fake_nvml", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{FAKE_NVML}={path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    log.warning("TEST ONLY: NVML is the fake module %s (%s is set)", path, FAKE_NVML)
    return module


def mps_control() -> str | None:
    path = os.environ.get(MPS_CONTROL)
    if path:
        log.warning("TEST ONLY: the MPS control program is the stand-in %s (%s is set)", path, MPS_CONTROL)
    return path or None
