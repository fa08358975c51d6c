"""The controller's ``plan()`` validates every command SpotfleetPolicy proposes.

``apply_commands`` re-checks room, gangs, non-interruptible jobs and budgets;
over random snapshots it must reject nothing the policy proposes — except
time-sliced GPU fractions, which ``spotfleet.model.capacity.Usage`` does not
model yet (it sees a second fraction on a GPU as a conflict).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from spotfleet.controller.plan import plan
from spotfleet.model.snapshot import Snapshot
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .test_properties import snapshots


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_controller_accepts_the_policy_commands(snap: Snapshot) -> None:
    jobs = dict(snap.jobs)
    result = plan(snap, SpotfleetPolicy())
    for r in result.rejected:
        job = jobs.get(getattr(r.command, "job_id", ""))
        assert job is not None and job.spec.resources.gpu_fraction, f"{r.command!r} rejected: {r.reason}"
