"""What the step process tells its API workers (``spotfleet.api.workers``): the
shared replica state, read whole across processes; the lease as a worker
reports it; the step histogram a worker's ``/metrics`` shows."""

from __future__ import annotations

import multiprocessing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotfleet.api.workers import PublishedLeadership, ReplicaState
from spotfleet.errors import Fenced
from spotfleet.metrics import FleetMetrics


def _reader(state: ReplicaState, n: int, out: Any) -> None:
    seen = []
    for _ in range(n):
        doc = state.read()  # a torn copy would not parse, or would mix two counters
        seen.append((doc.get("n", -1), doc.get("check", -1)))
    out.put(seen)


def test_a_worker_process_reads_whole_documents_while_the_step_process_writes() -> None:
    ctx = multiprocessing.get_context("spawn")
    state = ReplicaState(ctx)
    state.publish({"n": 0, "check": 0, "pad": ""})
    out = ctx.Queue()
    child = ctx.Process(target=_reader, args=(state, 3000, out))
    child.start()
    n = 0
    while out.empty() and child.is_alive():  # write all the while the child reads
        n += 1
        state.publish({"n": n, "check": n * 7, "pad": "x" * (n % 4000)})  # sizes vary: a torn read would show
    seen = out.get(timeout=60)
    child.join(30)
    assert child.exitcode == 0 and len(seen) == 3000
    assert all(check == n * 7 for n, check in seen), "every copy is one whole document"
    assert [n for n, _ in seen] == sorted(n for n, _ in seen), "never older than a copy read before"


def _leader(expires: datetime) -> dict[str, Any]:
    return {"lease": {"role": "leader", "epoch": 3, "identity": "h:1:a", "leader": {"holder": "h:1:a"},
                      "expires_at": expires.isoformat()}}  # fmt: skip


def test_a_worker_reports_its_replica_leading_only_while_the_published_lease_holds() -> None:
    state = ReplicaState(multiprocessing.get_context("spawn"))
    lease = PublishedLeadership(state)
    assert lease.status()["role"] == "follower" and not lease.is_leader  # nothing published yet
    state.publish(_leader(datetime.now(UTC) + timedelta(seconds=10)))
    assert lease.is_leader and lease.status()["epoch"] == 3 and "expires_at" not in lease.status()
    state.publish(_leader(datetime.now(UTC) - timedelta(seconds=1)))  # the step process stopped renewing
    assert lease.status()["role"] == "follower" and not lease.is_leader
    with pytest.raises(Fenced):
        lease.check(None)  # a worker can never pass a step's fence


def test_a_workers_metrics_show_the_step_processs_histogram() -> None:
    from spotfleet.clock import FakeClock
    from spotfleet.store import Store

    store = Store("sqlite://")
    store.migrate()
    stepping = FleetMetrics(store, FakeClock())
    for seconds in (0.004, 0.3, 3.0):
        assert stepping.step_seconds is not None
        stepping.step_seconds.observe(seconds)
    published = stepping.step_histogram()
    text = FleetMetrics(store, FakeClock(), published_steps=lambda: published).render().decode()
    assert 'spotfleet_reconcile_step_seconds_bucket{le="0.005"} 1.0' in text
    assert 'spotfleet_reconcile_step_seconds_bucket{le="0.5"} 2.0' in text
    assert "spotfleet_reconcile_step_seconds_count 3.0" in text
    assert "spotfleet_reconcile_step_seconds_sum 3.304" in text
