"""Issue 14: correct under pressure. Each test reproduces one reported failure
on the real controller (fake provider, fake clock, simulated agents)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

from spotfleet.model import JobState
from spotfleet.model.snapshot import Budget
from spotfleet.policies.spotfleet import SpotfleetPolicy
from spotfleet.providers.fake import FakeProvider, both_markets
from spotfleet.store import Store
from tests.controller.driver import AgentDriver, Script
from tests.controller.harness import TOKEN, Harness, make_harness


def spotfleet_harness(store: Store, tmp_path: Path, provider: FakeProvider | None = None,
                      budgets: tuple[Budget, ...] = ()) -> tuple[Harness, AgentDriver]:  # fmt: skip
    h = make_harness(store, tmp_path, provider)
    h.controller.policy = SpotfleetPolicy()
    h.controller.budgets = budgets
    driver = AgentDriver(h.controller, h.provider, h.store, token=lambda i: TOKEN + i)
    return h, driver


def run(h: Harness, driver: AgentDriver, ticks: int, *, dt: float = 5.0) -> None:
    for _ in range(ticks):
        driver.tick(h.clock.now())
        h.step()
        h.clock.advance(dt)


def launches_per_job(h: Harness) -> Counter[str]:
    c: Counter[str] = Counter()
    for req in h.provider.calls_named("launch"):
        for j in filter(None, req.tags.get("spotfleet:job-ids", "").split(",")):
            c[j] += 1
    return c


# ------------------------------------------------------------------ 1. livelock


def test_budget_bound_critical_job_starts_and_victims_do_not_rebuy(sqlite_store: Store, tmp_path: Path) -> None:
    """Global cap $3.5/h; opportunistic jobs fill it with spot at $0.9/h; a critical
    job needs on-demand at $3.06/h. The victims must not re-buy what they were
    evicted from, and the critical job must start within a few steps."""
    provider = FakeProvider(offering_list=both_markets())
    h, driver = spotfleet_harness(sqlite_store, tmp_path, provider, budgets=(Budget(3.5),))
    opp = [h.submit(name=f"opp{i}", priority="opportunistic") for i in range(3)]
    for n, j in enumerate(opp):  # they take different times to checkpoint
        driver.scripts[j.id] = Script(work_s=10_000, checkpoint_s=10.0 * n)
    run(h, driver, 4)
    assert all(h.job(j.id).state is JobState.RUNNING for j in opp)
    crit = h.submit(name="crit", priority="critical")
    driver.scripts[crit.id] = Script(work_s=10_000)
    started_at = None
    for n in range(40):
        run(h, driver, 1)
        if h.job(crit.id).state is JobState.RUNNING:
            started_at = n
            break
    assert started_at is not None and started_at <= 10, f"critical job still {h.job(crit.id).state}"
    run(h, driver, 30)
    assert h.job(crit.id).state is JobState.RUNNING
    per_job = launches_per_job(h)
    assert max(per_job[j.id] for j in opp) <= 2, per_job
    assert len(h.provider.calls_named("launch")) <= 8


# ------------------------------------------------------------------ 4. agents speak for themselves


def test_an_agent_cannot_report_for_a_job_bound_to_another_instance(sqlite_store: Store, tmp_path: Path) -> None:
    from spotfleet.wire import AgentEvent, Heartbeat, JobStatus

    h = make_harness(sqlite_store, tmp_path)
    a_job = h.submit(name="a")
    b_job = h.submit(name="b")
    h.step()
    h.register_all()
    h.step()
    h.report(a_job, "running")
    h.report(b_job, "running")
    h.step()
    a_inst = h.job(a_job.id).instance_ids[0]
    b = h.job(b_job.id)
    assert b.instance_ids[0] != a_inst and b.state is JobState.RUNNING
    forged = JobStatus(job_id=b.id, attempt=b.attempt, status="exited", exit_code=0)
    event = AgentEvent(kind="job.stopped", message="forged", at=h.clock.now(), job_id=b.id)
    h.controller.agents.heartbeat(TOKEN + a_inst, Heartbeat(jobs=[forged], events=[event]))
    h.step()
    assert h.job(b_job.id).state is JobState.RUNNING
    assert [x.job_id for x in h.beat(b.instance_ids[0]).assignments] == [b.id]
    assert not [e for e in h.store.events(job_id=b.id) if e.message == "forged"]
    # a report that reached the store anyway (an older controller, a race) is ignored by sync too
    from spotfleet.model.snapshot import NodeReport

    h.store.record_reports([NodeReport(job_id=b.id, attempt=b.attempt, node_rank=0, instance_id=a_inst,
                                       status="exited", exit_code=0, reported_at=h.clock.now())])  # fmt: skip
    h.step()
    assert h.job(b_job.id).state is JobState.RUNNING


# ------------------------------------------------------------------ 5. lost launch answer


def test_a_reissued_launch_keeps_the_agent_token_of_the_original_request(sqlite_store: Store, tmp_path: Path) -> None:
    from spotfleet.model import InstanceState
    from spotfleet.wire import RegisterRequest
    from tests.controller.driver import LaggingProvider

    provider = LaggingProvider(lose_answers=1, list_lag_s=60)
    h = make_harness(sqlite_store, tmp_path, provider)
    minted = iter(range(1, 1000))
    h.controller.executor.token_factory = lambda _i: f"tok-{next(minted)}"
    h.submit(name="train")
    h.step()  # accepted by the cloud, answer lost: the instance stays REQUESTED
    (inst,) = h.live()
    assert inst.state is InstanceState.REQUESTED
    h.clock.advance(5)
    h.step()  # re-issued with the same request id: the cloud returns what it built
    first, again = h.provider.calls_named("launch")
    assert first.request_id == again.request_id
    assert again.bootstrap.agent_token == first.bootstrap.agent_token
    assert len(h.provider.running()) == 1
    # the agent on the instance boots with the token of the first request, and is accepted
    answer = h.controller.agents.register(first.bootstrap.agent_token, RegisterRequest(provider_id=inst.provider_id))
    assert answer.instance_id == inst.id


# ------------------------------------------------------------------ 2. quota


def test_a_global_quota_makes_jobs_wait_instead_of_escalating(sqlite_store: Store, tmp_path: Path) -> None:
    from spotfleet.errors import QuotaExceeded, QuotaScope
    from spotfleet.providers.base import LaunchRequest, ProviderInstance

    class QuotaProvider(FakeProvider):
        limit = 2

        def launch(self, request: LaunchRequest) -> list[ProviderInstance]:
            if not [i for i in self.instances.values() if i.request_id == request.request_id] and \
                    len(self.running()) >= self.limit:  # fmt: skip
                self.calls.append(("launch", request))
                raise QuotaExceeded("at most 2 instances", scope=QuotaScope.GLOBAL)
            return super().launch(request)

    offers = (both_markets() + both_markets("p3.8xlarge", gpus=4, spot=4.0, on_demand=12.24)
              + both_markets("p4d.24xlarge", gpus=8, gpu="A100", spot=12.0, on_demand=32.77))  # fmt: skip
    h, driver = spotfleet_harness(sqlite_store, tmp_path, QuotaProvider(offering_list=offers))
    jobs = [h.submit(name=f"j{i}", priority="opportunistic") for i in range(4)]
    for j in jobs:
        driver.scripts[j.id] = Script(work_s=120)
    run(h, driver, 10)
    types = [r.offering.instance_type for r in h.provider.calls_named("launch")]
    assert set(types) == {"p3.2xlarge"}, types  # never climbed to the 4- or 8-GPU boxes
    refused = [e for e in h.store.events(limit=500) if e.kind == "provider.quota"]
    assert len(refused) == 1, [e.message for e in refused]  # asked once, then waited
    waiting = [h.job(j.id) for j in jobs if h.job(j.id).state is JobState.PENDING]
    assert len(waiting) == 2
    run(h, driver, 60)  # the first two finish, their instances are given back, the others run
    assert all(h.job(j.id).state is JobState.SUCCEEDED for j in jobs), [h.job(j.id).state for j in jobs]
    assert {r.offering.instance_type for r in h.provider.calls_named("launch")} == {"p3.2xlarge"}
    # an attempt is a run that started: the quota failure did not count
    assert all(h.job(j.id).runs == 1 for j in jobs)
    assert all(n == 1 for n in driver.run_numbers.values()), driver.run_numbers


def test_the_local_provider_quota_is_global(tmp_path: Path) -> None:
    from spotfleet.errors import QuotaExceeded, QuotaScope, instance_family
    from spotfleet.providers.fake import gpu_offering

    err = QuotaExceeded("x", scope=QuotaScope.GLOBAL)
    a, b = gpu_offering("p3.2xlarge"), gpu_offering("p4d.24xlarge", region="eu-west-1", zone="eu-west-1a")
    assert err.covers(b, failed=a)
    assert not QuotaExceeded("x", scope=QuotaScope.REGION).covers(b, failed=a)
    assert QuotaExceeded("x", scope=QuotaScope.FAMILY).covers(gpu_offering("p3.8xlarge"), failed=a)
    assert not QuotaExceeded("x", scope=QuotaScope.FAMILY).covers(gpu_offering("g5.xlarge"), failed=a)
    assert instance_family("a2-highgpu-1g") == "a2"
    import inspect

    from spotfleet.providers import local

    assert "scope=QuotaScope.GLOBAL" in inspect.getsource(local.LocalProvider.launch)


# ------------------------------------------------------------------ 3. failures with backoff


def test_retries_back_off_exponentially(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    driver = AgentDriver(h.controller, h.provider, h.store, token=lambda i: TOKEN + i)
    job = h.submit(name="flaky", max_retries=2)
    driver.scripts[job.id] = Script(work_s=1, exit_codes=[3, 3, 3])
    run(h, driver, 120, dt=1.0)
    assert h.job(job.id).state is JobState.FAILED
    starts = [at for j, _, _, at in driver.placements if j == job.id]
    assert len(starts) == 3
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    assert gaps[0] >= 15 and gaps[1] >= 30, gaps  # was: three runs in 4 s


def test_a_retry_avoids_the_instance_after_a_node_looking_failure(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    driver = AgentDriver(h.controller, h.provider, h.store, token=lambda i: TOKEN + i)
    sig = h.submit(name="segv", max_retries=3)
    driver.scripts[sig.id] = Script(work_s=1, exit_codes=[-11])  # killed by SIGSEGV
    cuda = h.submit(name="cuda", max_retries=3)
    driver.scripts[cuda.id] = Script(
        work_s=1, exit_codes=[1], node_error="RuntimeError: CUDA error: an illegal memory access"
    )
    app = h.submit(name="app", max_retries=3)
    driver.scripts[app.id] = Script(work_s=1, exit_codes=[3])  # the job's own bug: its node is fine
    run(h, driver, 60, dt=1.0)
    for j in (sig, cuda, app):
        assert h.job(j.id).state is JobState.SUCCEEDED
    where = {(j, a): i for j, a, i, _ in driver.placements}
    for j in (sig, cuda):
        runs = sorted(a for (jj, a) in where if jj == j.id)
        assert where[(j.id, runs[0])] != where[(j.id, runs[-1])], "retried on the node that failed it"
    outcomes = [a["outcome"] for a in h.store.job_attempts(sig.id)]
    assert outcomes[0] == "failed:node"


def test_explain_shows_a_crash_loop(sqlite_store: Store, tmp_path: Path) -> None:
    h = make_harness(sqlite_store, tmp_path)
    driver = AgentDriver(h.controller, h.provider, h.store, token=lambda i: TOKEN + i)
    job = h.submit(name="loop", max_retries=5)
    driver.scripts[job.id] = Script(work_s=1, exit_codes=[2, 2, 2, 2, 2, 2])
    seen = []
    for _ in range(80):
        run(h, driver, 1, dt=1.0)
        if h.job(job.id).failures >= 2 and h.job(job.id).state is JobState.PENDING:
            seen.append(h.controller.explain(job.id))
    assert seen
    out = seen[0]
    assert "crash loop" in out["summary"] and out["plan_code"] == "backoff", out["summary"]
    assert out["extra"]["retries"]["failures"] >= 2 and out["extra"]["retries"]["crash_loop"]
