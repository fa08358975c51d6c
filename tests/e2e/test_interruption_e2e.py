"""Checkpoint-on-interruption end to end on the local provider: a real notice on
the instance's metadata service, the agent's watcher, the job's signal handler,
the instance really reclaimed at the deadline, the job resumed elsewhere."""

from __future__ import annotations

import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from spotfleet.config import Config
from spotfleet.model import InstanceState, JobState
from spotfleet.model.events import NoticeKind
from spotfleet.model.spec import parse_spec
from spotfleet.service import Service
from tests.e2e.test_local_e2e import config, services, wait_for  # noqa: F401 - fixtures

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def steps_logged(path: Path) -> Counter[int]:
    return Counter(int(line.split()[1]) for line in path.read_text().splitlines() if line.strip())


def run_until_interrupted(service: Service, job_id: str, *, at_step: int, notice: float = 6.0) -> tuple[str, object]:
    store = service.store
    wait_for(f"step {at_step}", lambda: (store.get_job(job_id).progress.get("step") or 0) >= at_step, timeout=60)
    first = store.get_job(job_id).instance_ids[0]
    deadline = service.controller.interrupt(first, kind=NoticeKind.SPOT_INTERRUPTION, notice=timedelta(seconds=notice))
    return first, deadline


def test_job_checkpoints_in_the_notice_and_resumes_with_no_step_lost(config: Config, services: list[Service]) -> None:  # noqa: F811
    service = Service(config)
    services.append(service)
    service.start_background()
    spec = parse_spec({
        "name": "counter", "priority": "opportunistic",
        "command": ["python", str(EXAMPLES / "train_counter.py"), "--steps", "120", "--step-seconds", "0.05"],
    })  # fmt: skip
    job = service.controller.submit(spec)
    store = service.store
    first, deadline = run_until_interrupted(service, job.id, at_step=30)
    wait_for("the replacement is bought", lambda: any(i.reserved_for == job.id for i in store.list_instances()), 10)
    replacement = next(i for i in store.list_instances() if i.reserved_for == job.id)
    assert replacement.created_at < deadline, "bought before the reclaim, not after"
    wait_for("done", lambda: store.get_job(job.id).terminal, timeout=90)
    done = store.get_job(job.id)
    assert done.state is JobState.SUCCEEDED and done.interruptions == 1
    attempts = store.job_attempts(job.id)
    assert [a["outcome"] for a in attempts] == ["checkpointed", "succeeded"]
    assert attempts[1]["instance_id"] == replacement.id != first
    steps = steps_logged(Path(config.data_path) / "checkpoints" / job.id / "steps.log")
    assert sorted(steps) == list(range(1, 121)), "no step lost"
    assert max(steps.values()) == 1, "none repeated: it checkpointed on the notice"
    assert store.get_instance(first).state is InstanceState.TERMINATED


def test_job_ignoring_the_signal_loses_at_most_one_interval(config: Config, services: list[Service]) -> None:  # noqa: F811
    service = Service(config)
    services.append(service)
    service.start_background()
    spec = parse_spec({
        "name": "stubborn", "priority": "opportunistic", "checkpoint": {"grace": "2s"},
        "command": ["python", str(EXAMPLES / "ignore_signal.py"), "--steps", "120", "--step-seconds", "0.05",
                    "--checkpoint-every", "20"],
    })  # fmt: skip
    job = service.controller.submit(spec)
    store = service.store
    run_until_interrupted(service, job.id, at_step=30, notice=4.0)
    wait_for("done", lambda: store.get_job(job.id).terminal, timeout=90)
    done = store.get_job(job.id)
    assert done.state is JobState.SUCCEEDED and done.interruptions == 1
    steps = steps_logged(Path(config.data_path) / "checkpoints" / job.id / "steps.log")
    assert sorted(set(steps)) == list(range(1, 121)), "no step lost"
    repeated = [s for s, n in steps.items() if n > 1]
    assert 0 < len(repeated) <= 20, f"resumed from the last periodic checkpoint: repeated {len(repeated)} steps"


def test_gang_job_both_nodes_checkpoint_and_resume_together(config: Config, services: list[Service]) -> None:  # noqa: F811
    service = Service(config)
    services.append(service)
    service.start_background()
    counter = EXAMPLES / "train_counter.py"
    spec = parse_spec({
        "name": "ddp", "priority": "opportunistic", "resources": {"gpus": 1, "nodes": 2},
        # each rank keeps its own counter state (as if every rank saved its shard)
        "command": "d=$SPOTFLEET_CHECKPOINT_DIR/rank-$SPOTFLEET_NODE_RANK; mkdir -p $d; "
                   f"SPOTFLEET_CHECKPOINT_DIR=$d {sys.executable} {counter} --steps 100 --step-seconds 0.05",
    })  # fmt: skip
    job = service.controller.submit(spec)
    store = service.store
    first, _ = run_until_interrupted(service, job.id, at_step=25)
    wait_for("done", lambda: store.get_job(job.id).terminal, timeout=90)
    done = store.get_job(job.id)
    assert done.state is JobState.SUCCEEDED and done.interruptions == 1
    attempts = store.job_attempts(job.id)
    assert [(a["attempt"], a["node_rank"], a["outcome"]) for a in attempts] == [
        (1, 0, "checkpointed"), (1, 1, "checkpointed"), (2, 0, "succeeded"), (2, 1, "succeeded")]  # fmt: skip
    assert {a["instance_id"] for a in attempts if a["attempt"] == 2}.isdisjoint({first})
    for rank in (0, 1):
        steps = steps_logged(Path(config.data_path) / "checkpoints" / job.id / f"rank-{rank}" / "steps.log")
        assert sorted(set(steps)) == list(range(1, 101)), f"node {rank} lost no step"
