"""One agent heartbeat is one database transaction, on both backends.

At fleet scale every heartbeat of every agent lands on the store, so the
gateway reads the instance's bindings and writes presence, reports, notices,
events and usage folds in one ``Store.agent_exchange`` (bench:
``bench/heartbeat_transactions.py``). What it records must still be right.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from spotfleet.controller.agents import Unauthorized
from spotfleet.ledger.usage import load_usage
from spotfleet.store import Store
from spotfleet.wire import Heartbeat, JobStatus, NoticeReport
from tests.controller.harness import TOKEN, make_harness


@contextmanager
def transactions(store: Store) -> Iterator[list[int]]:
    count = [0]

    def begin(_conn: Any) -> None:
        count[0] += 1

    event.listen(store.engine, "begin", begin)
    try:
        yield count
    finally:
        event.remove(store.engine, "begin", begin)


def test_a_heartbeat_with_report_telemetry_and_notice_is_one_transaction(store: Store, tmp_path: Path) -> None:
    h = make_harness(store, tmp_path)
    job = h.submit(name="train", resources={"gpus": 1})
    h.step()
    h.register_all()
    h.step()
    inst = h.job(job.id).instance_ids[0]
    telemetry = {"gpus": [{"index": 0, "utilization_pct": 80.0, "memory_used_mib": 1000.0}],
                 "jobs": [{"job_id": job.id, "attempt": 1, "node_rank": 0, "utilization_pct": 80.0,
                           "memory_used_mib": 1000.0}]}  # fmt: skip
    beat = Heartbeat(
        jobs=[JobStatus(job_id=job.id, attempt=1, status="running", progress={"step": 7})],
        telemetry=telemetry,
        notices=[
            NoticeReport(
                kind="spot_interruption",
                observed_at=h.clock.now(),
                deadline=h.clock.now() + timedelta(minutes=2),
                source="imds",
            )
        ],
    )
    with transactions(store) as count:
        answer = h.controller.agents.heartbeat(TOKEN + inst, beat)
    assert count[0] == 1
    assert [a.job_id for a in answer.assignments] == [job.id]
    state = store.load_state()
    assert state.reports[(job.id, 1, 0)].progress == {"step": 7}
    assert [n.event.provider_instance_id for n in state.notices] == [h.instance(inst).provider_id]
    usage = load_usage(store, [job.id])[(job.id, 1, 0)]
    assert usage.gpu_samples == 1 and usage.last_step == 7 and usage.mean_utilization_pct == 80.0


def test_an_idle_heartbeat_is_one_transaction_and_an_unknown_token_writes_nothing(store: Store, tmp_path: Path) -> None:
    h = make_harness(store, tmp_path)
    h.submit(name="train", resources={"gpus": 1})
    h.step()
    inst = h.live()[0]
    with transactions(store) as count:
        h.controller.agents.heartbeat(TOKEN + inst.id, Heartbeat())
    assert count[0] == 1
    assert store.load_state().presence[inst.id].last_seen == h.clock.now()
    with pytest.raises(Unauthorized), transactions(store) as count:
        h.controller.agents.heartbeat("not-a-token", Heartbeat())
    assert store.load_state().presence.keys() == {inst.id}
