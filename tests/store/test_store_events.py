"""``Store.events`` filters (the Events page's query) on SQLite and PostgreSQL."""

from __future__ import annotations

from spotfleet.clock import FakeClock
from spotfleet.model.changes import EventRecord
from spotfleet.store import Store
from tests.store.test_store import new_job


def test_events_filter_by_kind_prefix_level_and_tenant(store: Store, clock: FakeClock) -> None:
    store.add_job(new_job(clock, "job-a", tenant="a"))
    store.add_job(new_job(clock, "job-b", tenant="b"))
    for kind, level, job in [("job.submitted", "info", "job-a"), ("job.failed", "error", "job-b"),
                             ("instance.requested", "info", None), ("job_x.odd", "warning", "job-a"),
                             ("job.running", "info", "job-a")]:  # fmt: skip
        store.add_event(EventRecord(at=clock.now(), kind=kind, message=kind, level=level, job_id=job))
        clock.advance(1)

    def kinds(**filters: object) -> list[str]:
        return [e.kind for e in store.events(limit=50, **filters)]  # type: ignore[arg-type]

    assert kinds(kind_prefix="job.") == ["job.submitted", "job.failed", "job.running"], "the dot is literal"
    assert kinds(kind_prefix="job_") == ["job_x.odd"], "_ is not a wildcard"
    assert kinds(level="error") == ["job.failed"]
    assert kinds(tenant="a") == ["job.submitted", "job_x.odd", "job.running"]
    assert kinds(tenant="a", kind_prefix="job.", level="info") == ["job.submitted", "job.running"]
    assert kinds(tenant="nobody") == []
    assert [e.kind for e in store.events(limit=2, tenant="a")] == ["job_x.odd", "job.running"], "the newest, in order"
