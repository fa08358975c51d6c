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


def test_a_heartbeat_over_http_is_one_transaction_and_tokens_still_sort_401_from_403(
    store: Store, tmp_path: Path
) -> None:
    """The API looks the agent's token up once, inside the heartbeat's own transaction;
    a wrong token is still a 401 and a user's token on an agent route a 403."""
    from fastapi.testclient import TestClient

    from spotfleet.api.app import create_app

    h = make_harness(store, tmp_path)
    h.submit(name="train", resources={"gpus": 1})
    h.step()
    inst = h.live()[0]
    client = TestClient(create_app(h.controller, api_token="admin-token-for-tests-0123456789"))
    auth = {"Authorization": f"Bearer {TOKEN}{inst.id}"}
    assert client.post("/v1/agent/register", json={"provider_id": inst.provider_id}, headers=auth).status_code == 200
    with transactions(store) as count:
        resp = client.post("/v1/agent/heartbeat", json={}, headers=auth)
    assert resp.status_code == 200 and resp.json()["instance_id"] == inst.id
    assert count[0] == 1
    wrong = client.post("/v1/agent/heartbeat", json={}, headers={"Authorization": f"Bearer {TOKEN}nope"})
    assert wrong.status_code == 401
    user = client.post(
        "/v1/agent/heartbeat", json={}, headers={"Authorization": "Bearer admin-token-for-tests-0123456789"}
    )
    assert user.status_code == 403 and "not an agent token" in user.json()["detail"]
