"""Issue 14, "Prove it": fleet invariants under random pressure.

Hypothesis draws workloads — priorities, deadlines, gangs, tenants, global and
per-tenant budgets, failing jobs (app errors, signals, CUDA errors), spot
reclaims, and a schedule of provider faults (capacity, quota, throttling, 5xx,
timeouts, answers lost after the cloud acted) — and runs each through the real
``Controller.step()`` on the fake cloud with an injected clock and simulated
agents (``workload.py``). After every step (``Fleet.check``):

- the spend rate is within every budget (global: every live instance not being
  given back; per tenant: its jobs' shares);
- no job has two live attempts;
- launches per job per hour are bounded (no preempt/re-buy livelock);
- a critical job whose on-demand launch fits under the caps once lower tiers
  are preempted starts within ``CRITICAL_STEPS`` steps (absent quota errors,
  which make the planner wait by design);

and at the end, once the faults stop: every job has ended, or is pending and
``explain`` names why; no instance is left running that the store does not
hold, none was built twice for one request, and an idle fleet runs nothing.
Deterministic (``derandomize``) and CI-sized.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from spotfleet.model import JobState
from spotfleet.model.snapshot import Budget
from tests.controller.workload import FAULTS, JobPlan, fresh_store, make_fleet, run_until_done

FAULT_STEPS = 30  # steps with faults and reclaims (15 s each)
CALM_STEPS = 160  # then faults stop: the workload must drain (40 min of virtual time)


@st.composite
def job_plans(draw: st.DrawFn) -> JobPlan:
    return JobPlan(
        priority=draw(st.sampled_from(["critical", "normal", "normal", "opportunistic", "opportunistic"])),
        gpus=draw(st.sampled_from([1, 1, 4])),
        nodes=draw(st.sampled_from([1, 1, 1, 2])),
        tenant=draw(st.sampled_from(["a", "b"])),
        work_s=draw(st.sampled_from([30, 120, 400])),
        exit_codes=tuple(draw(st.lists(st.sampled_from([3, -9, 0]), max_size=2))),
        max_retries=draw(st.integers(0, 3)),
        deadline_h=draw(st.one_of(st.none(), st.sampled_from([0.5, 3.0]))),
        submit_step=draw(st.integers(0, 12)),
        node_error=draw(st.booleans()),
        checkpoint_s=draw(st.sampled_from([0.0, 15.0, 45.0])),
    )


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, object]:
    budgets: list[Budget] = []
    cap = draw(st.one_of(st.none(), st.sampled_from([3.5, 8.0, 20.0])))
    if cap is not None:
        budgets.append(Budget(cap))
    tenant_cap = draw(st.one_of(st.none(), st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([2.0, 6.0]))))
    if tenant_cap is not None:
        budgets.append(Budget(tenant_cap[1], tenant=tenant_cap[0]))
    jobs = draw(st.lists(job_plans(), min_size=1, max_size=6))
    if draw(st.booleans()):
        # the squeeze of issue 14: opportunistic spot work fills a global cap, then critical work arrives
        budgets = [Budget(draw(st.sampled_from([3.5, 4.0])))]
        fill = [JobPlan(priority="opportunistic", work_s=600, submit_step=0,
                        checkpoint_s=draw(st.sampled_from([0.0, 15.0, 30.0, 60.0]))) for _ in range(3)]  # fmt: skip
        jobs = [*fill, JobPlan(priority="critical", work_s=300, submit_step=draw(st.integers(3, 10))), *jobs[:2]]
    return {
        "jobs": jobs,
        "budgets": tuple(budgets),
        "faults": draw(st.lists(st.one_of(st.none(), st.sampled_from(FAULTS)), max_size=40)),
        "reclaims": draw(st.sets(st.integers(2, FAULT_STEPS - 5), max_size=3)),
        "seed": draw(st.integers(0, 2**16)),
        "rate": draw(st.sampled_from([0.0, 0.1, 0.25])),  # then a share of every later call fails
    }


RUNS: list[tuple[int, int]] = []  # (jobs, steps) per example, for the report


@pytest.mark.timeout(600)  # one property, many workloads (~35 s of CPU)
@settings(max_examples=12, derandomize=True, deadline=None, print_blob=True, database=None,
          phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(workloads())
def test_fleet_invariants_hold_under_random_pressure(w: dict[str, object]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="invariants-"))
    jobs: list[JobPlan] = w["jobs"]  # type: ignore[assignment]
    budgets: tuple[Budget, ...] = w["budgets"]  # type: ignore[assignment]
    fleet = make_fleet(fresh_store(tmp), tmp, budgets=budgets, faults=w["faults"], rate=w["rate"],  # type: ignore[arg-type]
                       seed=w["seed"])  # type: ignore[arg-type]  # fmt: skip
    rng = random.Random(w["seed"])  # type: ignore[arg-type]
    queue = sorted(jobs, key=lambda p: p.submit_step)
    steps = 0
    for n in range(FAULT_STEPS):
        while queue and queue[0].submit_step <= n:
            fleet.submit(queue.pop(0))
        if n in w["reclaims"]:  # type: ignore[operator]
            fleet.reclaim_one(rng)
        fleet.settle_reclaims()
        fleet.step(15)
        steps += 1
        assert not fleet.violations, fleet.violations
    fleet.provider.enabled = False  # the storm is over: everything that can end must end

    def settled() -> bool:
        state = fleet.store.load_state()
        active = [j for j in state.jobs.values() if j.state is not JobState.PENDING]
        return not active and not fleet.provider.running() and not state.instances

    for _ in run_until_done(fleet, dt=15, max_steps=CALM_STEPS, until=settled):
        steps += 1
        assert not fleet.violations, fleet.violations
    RUNS.append((len(jobs), steps))
    print(f"invariants example {len(RUNS)}: {len(jobs)} jobs, {steps} steps, faults {dict(fleet.provider.injected)}")
    assert fleet.duplicates() == 0
    assert fleet.leaked() == []
    for job_id in fleet.unfinished():
        job = fleet.store.get_job(job_id)
        assert job.state is JobState.PENDING, f"{job_id} still {job.state.value} after the workload drained"
        why = fleet.controller.explain(job_id)
        assert why["summary"] and (why["plan_reason"] or why["note"]), why
    if not fleet.unfinished():
        assert fleet.provider.running() == [], "an idle fleet still runs instances"
