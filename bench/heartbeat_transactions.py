"""How many database transactions (and how many that write) does one agent
heartbeat cost the controller?

Every heartbeat of every agent lands on the store: at fleet scale (2,000
agents every 2 s) each extra transaction is an extra fsync on SQLite and an
extra round trip on PostgreSQL. This counts them with SQLAlchemy engine events
(``begin`` and ``commit``, plus statements that write) for four kinds of beat,
on a controller built like the tests' (fake provider, fake clock), through the
real ``AgentGateway.heartbeat``:

- idle: an instance with no job;
- report: one running job's status with progress;
- report + telemetry: the same with NVML figures (usage folded into the ledger);
- report + notice: the same with a spot notice from the metadata service.

    python bench/heartbeat_transactions.py                 # SQLite in a temp dir
    python bench/heartbeat_transactions.py --database postgresql://postgres@127.0.0.1:5432/test

Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event

from spotfleet.clock import FakeClock
from spotfleet.controller.controller import Controller
from spotfleet.model.snapshot import sequential_ids
from spotfleet.model.spec import parse_spec
from spotfleet.policies.simple import SimplePolicy
from spotfleet.providers.fake import FakeProvider
from spotfleet.store import Store
from spotfleet.wire import Heartbeat, JobStatus, NoticeReport, RegisterRequest

TOKEN = "bench-token-"


@dataclass
class Counts:
    transactions: int = 0
    writes: int = 0


@contextmanager
def counting(store: Store) -> Iterator[Counts]:
    counts = Counts()

    def on_begin(_conn: Any) -> None:
        counts.transactions += 1

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().split(" ", 1)[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            counts.writes += 1

    event.listen(store.engine, "begin", on_begin)
    event.listen(store.engine, "before_cursor_execute", on_execute)
    try:
        yield counts
    finally:
        event.remove(store.engine, "begin", on_begin)
        event.remove(store.engine, "before_cursor_execute", on_execute)


def build(url: str, data_dir: Path) -> tuple[Controller, FakeClock]:
    store = Store(url)
    store.migrate()
    clock = FakeClock()
    provider = FakeProvider(clock=clock)
    controller = Controller(
        store=store, providers={"fake": provider}, policy=SimplePolicy(), clock=clock, data_dir=data_dir,
        controller_url=lambda: "http://127.0.0.1:8478", new_id=sequential_ids(),
    )  # fmt: skip
    controller.executor.token_factory = lambda instance_id: TOKEN + instance_id
    return controller, clock


def measure(url: str, data_dir: Path) -> dict[str, dict[str, int]]:
    controller, clock = build(url, data_dir)
    job = controller.submit(parse_spec({"name": "bench", "command": ["python", "train.py"], "resources": {"gpus": 1}}))
    controller.step()
    inst = controller.store.get_job(job.id).instance_ids[0]
    token = TOKEN + inst
    agents = controller.agents
    agents.register(token, RegisterRequest(provider_id=controller.store.get_instance(inst).provider_id))
    controller.step()
    status = JobStatus(job_id=job.id, attempt=1, status="running", progress={"step": 10})
    telemetry = {"gpus": [{"index": 0, "utilization_pct": 93.0, "memory_used_mib": 12000.0,
                           "memory_total_mib": 24000.0}],
                 "jobs": [{"job_id": job.id, "attempt": 1, "node_rank": 0, "utilization_pct": 93.0,
                           "memory_used_mib": 12000.0}]}  # fmt: skip
    notice = NoticeReport(kind="spot_interruption", observed_at=clock.now(),
                          deadline=clock.now() + timedelta(minutes=2), source="imds")  # fmt: skip
    beats = {
        "report": Heartbeat(jobs=[status]),
        "report + telemetry": Heartbeat(jobs=[status], telemetry=telemetry),
        "report + notice": Heartbeat(jobs=[status], notices=[notice]),
    }
    out: dict[str, dict[str, int]] = {}
    empty = _empty_instance(controller, clock)
    with counting(controller.store) as c:
        agents.heartbeat(TOKEN + empty, Heartbeat())
    out["idle"] = {"transactions": c.transactions, "writes": c.writes}
    for name, beat in beats.items():
        clock.advance(2)
        with counting(controller.store) as c:
            agents.heartbeat(token, beat)
        out[name] = {"transactions": c.transactions, "writes": c.writes}
    return out


def _empty_instance(controller: Controller, clock: FakeClock) -> str:
    """A registered instance with nothing bound to it (a job that finished)."""
    job = controller.submit(parse_spec({"name": "short", "command": ["true"], "resources": {"gpus": 1}}))
    controller.step()
    got = controller.store.get_job(job.id)
    inst = got.instance_ids[0]
    token = TOKEN + inst
    controller.agents.register(token, RegisterRequest(provider_id=controller.store.get_instance(inst).provider_id))
    controller.agents.heartbeat(token, Heartbeat(jobs=[JobStatus(job_id=job.id, attempt=1, status="exited",
                                                                 exit_code=0)]))  # fmt: skip
    clock.advance(1)
    controller.step()
    return inst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default=None, help="a database URL (default: SQLite in a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="spotfleet-hb-") as tmp:
        url = args.database or f"sqlite:///{Path(tmp) / 'spotfleet.db'}"
        result = measure(url, Path(tmp))
    backend = url.split(":", 1)[0]
    print(f"heartbeat cost on {backend}: database transactions / writing statements per beat")
    print(f"{'beat':<22}{'transactions':>14}{'writes':>8}")
    for name, c in result.items():
        print(f"{name:<22}{c['transactions']:>14}{c['writes']:>8}")
    print(json.dumps({"bench": "heartbeat_transactions", "backend": backend, "beats": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
