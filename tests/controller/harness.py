"""A controller on a real store with the fake provider and a fake clock, plus
helpers that play the node agents through the same entry points the API uses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from spotfleet.clock import FakeClock
from spotfleet.controller.controller import Controller
from spotfleet.model import Instance, Job
from spotfleet.model.snapshot import sequential_ids
from spotfleet.model.spec import parse_spec
from spotfleet.policies.simple import SimplePolicy
from spotfleet.providers.fake import FakeProvider
from spotfleet.store import Store
from spotfleet.wire import Heartbeat, HeartbeatResponse, JobStatus, RegisterRequest

TOKEN = "token-for-tests"


@dataclass
class Harness:
    controller: Controller
    provider: FakeProvider
    clock: FakeClock
    store: Store

    def submit(self, **spec: Any) -> Job:
        data = {"command": ["python", "train.py"], **spec}
        return self.controller.submit(parse_spec(data))

    def step(self) -> None:
        self.controller.step()

    def job(self, job_id: str) -> Job:
        return self.store.get_job(job_id)

    def instance(self, instance_id: str) -> Instance:
        return self.store.get_instance(instance_id)

    def live(self) -> list[Instance]:
        return self.store.list_instances(live_only=True)

    def register_all(self) -> None:
        for inst in self.live():
            self.controller.agents.register(TOKEN + inst.id, RegisterRequest(provider_id=inst.provider_id))

    def beat(self, instance_id: str, *statuses: JobStatus) -> HeartbeatResponse:
        return self.controller.agents.heartbeat(TOKEN + instance_id, Heartbeat(jobs=list(statuses)))

    def report(self, job: Job, status: str, *, exit_code: int | None = None, rank: int = 0) -> None:
        job = self.job(job.id)
        binding = next(b for b in job.bindings if b.node_rank == rank)
        self.beat(binding.instance_id, JobStatus(job_id=job.id, attempt=job.attempt, node_rank=rank,
                                                 status=status, exit_code=exit_code))  # fmt: skip


def make_harness(store: Store, tmp_path: Path, provider: FakeProvider | None = None,
                 *, idle_ttl: timedelta = timedelta(minutes=5)) -> Harness:  # fmt: skip
    clock = FakeClock()
    provider = provider or FakeProvider(clock=clock)
    provider.clock = clock
    ids = sequential_ids()
    controller = Controller(store=store, providers={"fake": provider}, policy=SimplePolicy(idle_ttl=idle_ttl),
                            clock=clock, data_dir=tmp_path, controller_url=lambda: "http://127.0.0.1:8478", new_id=ids)  # fmt: skip
    # deterministic agent tokens: TOKEN + instance id
    controller.executor.token_factory = lambda instance_id: TOKEN + instance_id
    return Harness(controller, provider, clock, store)
