"""Fixtures for the simulator tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from spotfleet.sim.traces import TraceFile, TraceSet, build_trace_set

from .helpers import SHARED_TRACES, MakeSet, trace_file


@pytest.fixture
def make_set() -> MakeSet:
    """``make_set(("us-east-1a", [1, 0, 1]), ("us-east-1b", [0, 1, 1]), tick=1800, spot=...)``."""

    def build(*zones: tuple[str, Sequence[int]] | TraceFile, **common: Any) -> TraceSet:
        files = [z if isinstance(z, TraceFile) else trace_file(z[0], z[1], **common) for z in zones]
        return build_trace_set([(f.zone, f) for f in files])

    return build


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"reference traces not found at {SHARED_TRACES} (set SPOTFLEET_SHARED_TRACES)")
    return SHARED_TRACES
