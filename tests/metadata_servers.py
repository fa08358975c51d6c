"""Fixtures shared by the agent and metadata tests: emulated metadata servers on a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from spotfleet.clock import FakeClock
from spotfleet.metadata import AwsImdsServer, GcpMetadataServer

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def imds(clock: FakeClock) -> Iterator[AwsImdsServer]:
    with AwsImdsServer(instance_id="i-0abc", zone="us-east-1b", clock=clock) as server:
        yield server


@pytest.fixture
def gce(clock: FakeClock) -> Iterator[GcpMetadataServer]:
    with GcpMetadataServer(
        instance_id="4520031799277581759", name="worker-1", zone="us-central1-a", clock=clock
    ) as server:
        yield server
