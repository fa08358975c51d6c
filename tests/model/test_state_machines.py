"""The job and instance lifecycles are enforced, and every move is recorded."""

from __future__ import annotations

import pytest

from spotfleet.clock import FakeClock
from spotfleet.errors import IllegalTransition
from spotfleet.model import (
    INSTANCE_TRANSITIONS,
    JOB_TRANSITIONS,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_JOB_STATES,
    Instance,
    InstanceState,
    Job,
    JobState,
)
from spotfleet.model.spec import parse_spec
from spotfleet.providers.fake import gpu_offering


def make_job(clock: FakeClock) -> Job:
    now = clock.now()
    return Job(id="job-1", spec=parse_spec({"name": "a", "command": "x"}), state=JobState.PENDING,
               created_at=now, state_since=now)  # fmt: skip


def test_every_state_has_a_row_and_terminals_are_dead_ends() -> None:
    assert set(JOB_TRANSITIONS) == set(JobState)
    assert set(INSTANCE_TRANSITIONS) == set(InstanceState)
    assert all(not JOB_TRANSITIONS[s] for s in TERMINAL_JOB_STATES)
    assert all(not INSTANCE_TRANSITIONS[s] for s in TERMINAL_INSTANCE_STATES)


def test_job_history_is_timestamped(clock: FakeClock) -> None:
    job = make_job(clock)
    job.transition(JobState.BOUND, at=clock.now(), reason="placed")
    clock.advance(5)
    job.transition(JobState.RUNNING, at=clock.now(), reason="started")
    assert [(h.from_state, h.to_state) for h in job.history] == [("pending", "bound"), ("bound", "running")]
    assert (job.history[1].at - job.history[0].at).total_seconds() == 5
    assert job.state_since == clock.now()


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], JobState.RUNNING),  # pending cannot run without being placed
        ([JobState.BOUND, JobState.RUNNING, JobState.SUCCEEDED], JobState.PENDING),  # terminal
        ([JobState.CANCELLED], JobState.BOUND),
    ],
)
def test_illegal_job_moves_raise(clock: FakeClock, path: list[JobState], illegal: JobState) -> None:
    job = make_job(clock)
    for state in path:
        job.transition(state, at=clock.now())
    with pytest.raises(IllegalTransition, match=f"-> {illegal.value}"):
        job.transition(illegal, at=clock.now())


def test_illegal_instance_moves_raise(clock: FakeClock) -> None:
    now = clock.now()
    inst = Instance(id="sf-1", offering=gpu_offering(), request_id="sf-1", state=InstanceState.REQUESTED,
                    created_at=now, state_since=now)  # fmt: skip
    with pytest.raises(IllegalTransition):
        inst.transition(InstanceState.RUNNING, at=now)  # must be accepted by the cloud first
    inst.transition(InstanceState.PROVISIONING, at=now)
    inst.transition(InstanceState.RUNNING, at=now)
    inst.transition(InstanceState.TERMINATED, at=now, reason="reclaimed")
    assert inst.terminated_at == now
    with pytest.raises(IllegalTransition):
        inst.transition(InstanceState.RUNNING, at=now)


def test_offerings_chain_and_sort() -> None:
    from spotfleet.model.offering import Market, NodeRequirements, Offerings
    from spotfleet.providers.fake import both_markets, gpu_offering

    offers = Offerings([*both_markets(), gpu_offering("p3.8xlarge", gpus=4, spot=3.2, on_demand=12.24)])
    four = offers.available().spot().compatible(NodeRequirements(gpus=4))
    assert [o.instance_type for o in four] == ["p3.8xlarge"]
    assert [o.price_per_hour for o in offers.by_price()] == [0.9, 3.06, 3.2]
    cheapest = offers.market(Market.ON_DEMAND).cheapest()
    assert cheapest is not None and cheapest.price_per_hour == 3.06
