"""The controller's reconcile scenarios, run with SpotfleetPolicy.

Every test of ``tests/controller/test_reconcile.py`` (lifecycle to zero,
capacity errors tried in the same step, spot interruption → drain → requeue →
replacement, gangs, rebalance, retries, cancel, lost agents...) is collected
here a second time with the harness building ``SpotfleetPolicy`` instead of
``SimplePolicy``: the default policy must drive the real controller through
the same scenarios.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from spotfleet.policies.knobs import Knobs
from spotfleet.policies.spotfleet import SpotfleetPolicy
from tests.controller import harness
from tests.controller.test_reconcile import *  # noqa: F403


def _spotfleet(idle_ttl: timedelta) -> SpotfleetPolicy:
    return SpotfleetPolicy(Knobs(idle_ttl_s=idle_ttl.total_seconds()))


@pytest.fixture(autouse=True)
def _use_spotfleet_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "SimplePolicy", _spotfleet)
