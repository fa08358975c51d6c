"""End to end on the local provider: real controller, real HTTP API, real agent
and job processes. The only test that waits on wall-clock time — real processes
run here — and it polls with a deadline rather than sleeping blind."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spotfleet.config import Config, load_config
from spotfleet.model import InstanceState, JobState
from spotfleet.model.spec import parse_spec
from spotfleet.service import Service

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return load_config(overrides={
        "data_dir": str(tmp_path), "api.port": free_port(), "reconcile.interval": "0.3s",
        "reconcile.idle_ttl": "2s", "reconcile.heartbeat": "0.3s",
        "providers": {"local": {"heartbeat": "0.3s", "max_instances": 6}},
    })  # fmt: skip


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for s in started:
        for p in s.providers.values():
            p.stop_all()  # type: ignore[attr-defined]
        if s.scheduler.running:
            s.stop()


def job(name: str, steps: int, **extra: object) -> dict[str, object]:
    return {"name": name, "command": ["python", "-m", "spotfleet.demo_job", "--steps", str(steps),
                                      "--step-seconds", "0.05", "--checkpoint-every", "10"], **extra}  # fmt: skip


def test_three_jobs_restart_midway_nothing_lost_no_duplicates(config: Config, services: list[Service]) -> None:
    first = Service(config)
    services.append(first)
    first.start_background()
    specs = [job("one", 40, priority="opportunistic"), job("two-gpus", 50, resources={"gpus": 2}),
             job("three", 60, priority="critical")]  # fmt: skip
    ids = [first.controller.submit(parse_spec(s)).id for s in specs]
    store = first.store
    wait_for("every job running", lambda: all(store.get_job(i).state is JobState.RUNNING for i in ids))
    launched_before = {i.id for i in store.list_instances()}
    first.stop()  # the controller goes away mid-run; the instances and jobs do not

    second = Service(config)
    services.append(second)
    second.start_background()
    store = second.store
    wait_for("every job done", lambda: all(store.get_job(i).terminal for i in ids), timeout=90)
    assert [store.get_job(i).state for i in ids] == [JobState.SUCCEEDED] * 3
    assert {i.id for i in store.list_instances()} == launched_before, "no instance launched twice"
    two = store.get_job(ids[1])
    assert len(two.bindings) == 0 and store.job_attempts(two.id)[0]["gpus"] == 2
    assert "done: 50 steps" in second.controller.logs(ids[1])

    wait_for("scale to zero", lambda: not store.list_instances(live_only=True), timeout=30)
    local = second.providers["local"]
    assert all(i.state.value == "terminated" for i in local.list_instances())
    for inst in store.list_instances():
        assert inst.state is InstanceState.TERMINATED
        segments = store.billing_segments(instance_id=inst.id)
        assert len(segments) == 1 and segments[0].end is not None and segments[0].end > segments[0].start
