"""The store on SQLite and PostgreSQL: round trips, ownership of columns, billing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from spotfleet.clock import FakeClock
from spotfleet.errors import NotFound
from spotfleet.model import Binding, Instance, InstanceState, Job, JobState
from spotfleet.model.changes import AttemptEnd, AttemptStart, Changes
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import NodeReport
from spotfleet.model.spec import parse_spec
from spotfleet.providers.fake import gpu_offering
from spotfleet.store import Store
from spotfleet.store.schema import Base
from spotfleet.store.store import hash_token


def new_job(clock: FakeClock, job_id: str = "job-1", **spec: object) -> Job:
    now = clock.now()
    data = {"name": "train", "command": ["python", "t.py"], **spec}
    return Job(id=job_id, spec=parse_spec(data), state=JobState.PENDING, created_at=now, state_since=now)


def new_instance(clock: FakeClock, instance_id: str = "sf-1", *, price: float = 0.9) -> Instance:
    now = clock.now()
    o = gpu_offering(spot=price, gpus=4)
    return Instance(id=instance_id, offering=o, request_id=instance_id, state=InstanceState.REQUESTED,
                    created_at=now, state_since=now)  # fmt: skip


def test_migrations_match_the_models(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"schema drift: write an Alembic migration for {diff}"


def test_migrate_is_idempotent(store: Store) -> None:
    store.migrate()
    assert store.list_jobs() == []


def test_job_round_trip_and_filters(store: Store, clock: FakeClock) -> None:
    job = new_job(clock, resources={"gpus": 2}, priority="critical", tenant="ml")
    store.add_job(job)
    got = store.get_job("job-1")
    assert got.spec == job.spec and got.state is JobState.PENDING and got.created_at == clock.now()
    store.add_job(new_job(clock, "job-2"))
    assert [j.id for j in store.list_jobs(tenant="ml")] == ["job-1"]
    assert [j.id for j in store.list_jobs(states=[JobState.RUNNING])] == []
    with pytest.raises(NotFound):
        store.get_job("nope")


def test_commit_writes_lifecycle_but_never_undoes_a_cancel(store: Store, clock: FakeClock) -> None:
    store.add_job(new_job(clock))
    state = store.load_state()
    job = state.jobs["job-1"]
    store.request_cancel("job-1")  # the API flags it while the step holds an older copy
    inst = new_instance(clock)
    clock.advance(1)
    job.bindings = (Binding(0, inst.id, (0, 1)),)
    job.attempt = 1
    job.transition(JobState.BOUND, at=clock.now(), reason="placed")
    store.commit(Changes(jobs=[job], new_instances=[(inst, "secret-token")],
                         attempts_started=[AttemptStart("job-1", 1, 0, inst.id, 2, 0, clock.now())]), now=clock.now())  # fmt: skip
    got = store.get_job("job-1")
    assert got.state is JobState.BOUND and got.bindings == job.bindings
    assert got.cancel_requested, "the step's write must not clear the API's cancel flag"
    assert got.history[-1].reason == "placed"
    assert store.instance_for_token("secret-token").id == "sf-1"  # type: ignore[union-attr]
    assert store.instance_for_token("wrong") is None
    assert store.open_attempts_on("sf-1") == [("job-1", 1, 0)]
    store.commit(Changes(attempts_ended=[AttemptEnd("job-1", 1, "succeeded", clock.now())]), now=clock.now())
    assert store.open_attempts_on("sf-1") == []
    assert hash_token("secret-token") != "secret-token"


def test_billing_segments_follow_the_instance(store: Store, clock: FakeClock) -> None:
    inst = new_instance(clock)
    store.commit(Changes(new_instances=[(inst, "t" * 10)]), now=clock.now())
    assert store.billing_segments() == []  # REQUESTED is not paid for
    clock.advance(10)
    inst.provider_id, inst.launched_at = "fake-1", clock.now()
    inst.transition(InstanceState.PROVISIONING, at=clock.now())
    store.commit(Changes(instances=[inst]), now=clock.now())
    (seg,) = store.billing_segments()
    assert (
        seg.start == clock.now() and seg.end is None and seg.price_per_hour == 0.9 and seg.market == Market.SPOT.value
    )
    clock.advance(3600)
    inst.offering = inst.offering.with_price(1.2, source="live", observed_at=clock.now())
    store.commit(Changes(instances=[inst]), now=clock.now())  # the spot price changed: new segment
    clock.advance(1800)
    inst.transition(InstanceState.TERMINATED, at=clock.now())
    store.commit(Changes(instances=[inst]), now=clock.now())
    segs = store.billing_segments(instance_id="sf-1")
    assert [(s.price_per_hour, (s.end - s.start).total_seconds()) for s in segs] == [(0.9, 3600.0), (1.2, 1800.0)]


def test_inbox_reports_and_presence(store: Store, clock: FakeClock) -> None:
    store.add_job(new_job(clock))
    state = store.load_state()
    job = state.jobs["job-1"]
    job.attempt = 1
    store.commit(Changes(jobs=[job]), now=clock.now())
    store.record_reports([NodeReport("job-1", 1, 0, "sf-1", "running", reported_at=clock.now())])
    store.record_reports([NodeReport("job-1", 1, 0, "sf-1", "exited", exit_code=0, reported_at=clock.now())])
    store.record_reports([NodeReport("job-1", 0, 0, "sf-0", "exited", exit_code=1, reported_at=clock.now())])
    state = store.load_state()
    assert list(state.reports) == [("job-1", 1, 0)]  # stale attempts are ignored
    assert state.reports[("job-1", 1, 0)].exit_code == 0
    inst = new_instance(clock)
    store.commit(Changes(new_instances=[(inst, "x" * 10)]), now=clock.now())
    store.record_presence("sf-1", provider_id="fake-1", at=clock.now(), info={})
    clock.advance(timedelta(seconds=30).total_seconds())
    store.record_presence("sf-1", provider_id=None, at=clock.now(), info={})
    p = store.load_state().presence["sf-1"]
    assert (p.last_seen - p.registered_at).total_seconds() == 30


def test_live_jobs_specs_are_parsed_once_and_dropped_when_the_job_ends(store: Store, clock: FakeClock) -> None:
    """The step reloads the backlog every time; a spec (frozen, never rewritten) is
    read and validated once per job, and forgotten once the job is no longer live."""
    store.add_job(new_job(clock, "job-1", resources={"gpus": 2}))
    store.add_job(new_job(clock, "job-2", tenant="ml"))
    first = store.load_state().jobs
    assert first["job-1"].spec.resources.gpus == 2 and first["job-2"].spec.tenant == "ml"
    store.add_job(new_job(clock, "job-3", priority="critical"))
    second = store.load_state().jobs
    assert second["job-1"].spec is first["job-1"].spec and second["job-2"].spec is first["job-2"].spec
    assert second["job-3"].spec.priority.value == "critical"
    done = second["job-1"]
    done.transition(JobState.CANCELLED, at=clock.now(), reason="test")
    store.commit(Changes(jobs=[done]), now=clock.now())
    assert set(store.load_state().jobs) == {"job-2", "job-3"}
    assert set(store._specs) == {"job-2", "job-3"}, "an ended job's spec is not kept"
    assert store.get_job("job-1").spec == first["job-1"].spec


def test_load_state_rereads_only_changed_rows_and_hands_out_copies(store: Store, clock: FakeClock) -> None:
    """The step reloads the live backlog every time; the store keeps what it converted
    and re-reads a row only when its key (version, cancel flag, state) moved. Every
    way a row changes must show at the next load, and what a load returns is the
    caller's to mutate."""
    store.add_job(new_job(clock, "job-1"))
    store.add_job(new_job(clock, "job-2"))
    inst = new_instance(clock)
    store.commit(Changes(new_instances=[(inst, "t" * 10)]), now=clock.now())
    assert store.load_state().instances["sf-1"].provider_id is None
    # the same object written again in the same step (the executor's launch result)
    inst.provider_id, inst.launch_attempts = "fake-1", 1
    store.commit(Changes(instances=[inst]), now=clock.now())
    first = store.load_state()
    assert first.instances["sf-1"].provider_id == "fake-1" and first.instances["sf-1"].launch_attempts == 1
    template = store._job_rows["job-2"][1]

    # mutating what a load returned changes nothing for the next load
    job = first.jobs["job-1"]
    job.progress["step"] = 7
    job.transition(JobState.CANCELLED, at=clock.now(), reason="not committed")
    first.instances["sf-1"].message = "scratch"
    again = store.load_state()
    assert again.jobs["job-1"].state is JobState.PENDING and again.jobs["job-1"].progress == {}
    assert again.jobs["job-1"].history == [] and again.instances["sf-1"].message == ""
    assert store._job_rows["job-2"][1] is template, "an unchanged row is not re-read"

    # a commit, then a second commit of the same object (same step): the last write shows
    clock.advance(1)
    job = again.jobs["job-1"]
    job.attempt = 1
    job.bindings = (Binding(0, "sf-1", (0,)),)
    job.transition(JobState.BOUND, at=clock.now(), reason="placed")
    store.commit(Changes(jobs=[job]), now=clock.now())
    assert store.load_state().jobs["job-1"].state is JobState.BOUND  # a reader in between (`explain`)
    job.message = "launch failed"  # state, attempt and state_since unchanged: only the version says so
    store.commit(Changes(jobs=[job]), now=clock.now())
    third = store.load_state()
    assert third.jobs["job-1"].state is JobState.BOUND and third.jobs["job-1"].message == "launch failed"
    assert third.jobs["job-1"].bindings == (Binding(0, "sf-1", (0,)),)

    # the API's cancel flag (no version bump)
    store.request_cancel("job-2")
    assert store.load_state().jobs["job-2"].cancel_requested

    # another writer (a replica, a restarted process) with its own cache
    other = Store(store.url)
    try:
        theirs = other.load_state().jobs["job-1"]
        theirs.message = "written elsewhere"
        other.commit(Changes(jobs=[theirs]), now=clock.now())
    finally:
        other.close()
    assert store.load_state().jobs["job-1"].message == "written elsewhere"

    # presence: the planner's part of the agent's info, and the newest last_seen
    store.record_presence("sf-1", provider_id="fake-1", at=clock.now(),
                          info={"partitions": {"mig": {"unfit": {"*": "no MIG"}}}, "telemetry": {"gpus": []}})  # fmt: skip
    clock.advance(30)
    store.record_presence("sf-1", provider_id=None, at=clock.now(), info={})
    p = store.load_state().presence["sf-1"]
    assert p.mig_unfit == (("*", "no MIG"),) and p.last_seen == clock.now()

    # a job that ends leaves the cache
    done = store.load_state().jobs["job-2"]
    done.transition(JobState.CANCELLED, at=clock.now(), reason="cancelled")
    store.commit(Changes(jobs=[done]), now=clock.now())
    assert set(store.load_state().jobs) == {"job-1"} and set(store._job_rows) == {"job-1"}


def test_job_and_instance_copies_are_equal_and_independent(clock: FakeClock) -> None:
    from spotfleet.model.job import Checkpoint
    from spotfleet.store.convert import copy_instance, copy_job

    job = new_job(clock)
    job.checkpoint = Checkpoint("/ckpt", 3, clock.now(), 1)
    job.progress = {"step": 3}
    job.transition(JobState.BOUND, at=clock.now(), reason="placed")
    job.version = 4
    twin = copy_job(job)
    assert twin == job and twin.history is not job.history and twin.progress is not job.progress
    assert twin.checkpoint is not job.checkpoint
    inst = new_instance(clock)
    inst.cordoned, inst.reserved_for, inst.version = True, "job-9", 2
    inst.transition(InstanceState.PROVISIONING, at=clock.now())
    twin_i = copy_instance(inst)
    assert twin_i == inst and twin_i.history is not inst.history


def test_identical_specs_of_a_batch_are_validated_once(store: Store, clock: FakeClock) -> None:
    store.add_jobs([new_job(clock, "job-a", resources={"gpus": 2}), new_job(clock, "job-b", resources={"gpus": 2}),
                    new_job(clock, "job-c", resources={"gpus": 1})], [])  # fmt: skip
    jobs = store.load_state().jobs
    assert jobs["job-a"].spec is jobs["job-b"].spec and jobs["job-a"].spec.resources.gpus == 2
    assert jobs["job-c"].spec.resources.gpus == 1
    assert store.get_job("job-b").spec == jobs["job-b"].spec
