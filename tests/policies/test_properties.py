"""Invariants of SpotfleetPolicy over random snapshots (hypothesis).

- no job is bound to an instance without room for it (GPU indices, MIG slices,
  fractions, gang = all nodes on distinct instances in one zone);
- no instance holding a non-interruptible job is terminated or drained, and no
  non-interruptible job is preempted;
- the spend rate after the plan is within every budget (global and tenant).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotfleet.catalog import load_catalog
from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import Binding, Job, JobState
from spotfleet.model.offering import Offering
from spotfleet.model.snapshot import Bind, Budget, Drain, Launch, Preempt, Snapshot, Terminate
from spotfleet.model.spec import MIG_PROFILES
from spotfleet.policies.spotfleet import SpotfleetPolicy
from spotfleet.policies.throughput import is_mig_capable

from .builders import T0, instance, job, snapshot

CATALOG = load_catalog()
# a varied, small slice of the real catalog: every 23rd offering (~70, both markets, both clouds)
OFFERINGS: list[Offering] = [o for i, o in enumerate(CATALOG) if i % 23 == 0]
MIG_HOSTS = [o for o in CATALOG if is_mig_capable(o.gpu)][:6]
POOL = OFFERINGS + MIG_HOSTS
TENANTS = ["a", "b"]
PRIORITIES = ["critical", "normal", "opportunistic"]


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["whole", "whole", "whole", "mig", "fraction", "gang"]))
    if kind == "mig":
        return {"mig": draw(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "1g.5gb", "3g.20gb"]))}
    if kind == "fraction":
        return {"gpu_fraction": draw(st.sampled_from([0.25, 0.5, 0.3]))}
    if kind == "gang":
        return {"gpus": draw(st.sampled_from([1, 4, 8])), "nodes": draw(st.integers(2, 3))}
    return {"gpus": draw(st.sampled_from([1, 1, 2, 4, 8])),
            "gpu_memory_gib": draw(st.sampled_from([0, 0, 16, 40]))}  # fmt: skip


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    instances: list[Instance] = []
    jobs: list[Job] = []
    n_inst = draw(st.integers(0, 6))
    for k in range(n_inst):
        o = draw(st.sampled_from(POOL))
        state = draw(st.sampled_from([InstanceState.RUNNING, InstanceState.RUNNING, InstanceState.PROVISIONING,
                                      InstanceState.REQUESTED, InstanceState.DRAINING]))  # fmt: skip
        idle = T0 - timedelta(minutes=draw(st.integers(0, 30)))
        inst = instance(f"i{k}", o, state=state, idle_since=idle)
        inst.cordoned = state is InstanceState.DRAINING or (draw(st.booleans()) and draw(st.booleans()))
        instances.append(inst)
        free = list(range(o.gpu_count))
        for r in range(draw(st.integers(0, 3))):
            prio = draw(st.sampled_from(PRIORITIES))
            tenant = draw(st.sampled_from(TENANTS))
            interruptible = draw(st.sampled_from([None, None, False]))
            extra: dict[str, Any] = {"priority": prio, "tenant": tenant}
            if interruptible is not None:
                extra["interruptible"] = interruptible
            if draw(st.booleans()) and is_mig_capable(o.gpu) and free:
                profile = draw(st.sampled_from(["1g.10gb", "3g.40gb"]))
                gpu = free.pop()
                binding = Binding(0, inst.id, (gpu,), mig_slices=MIG_PROFILES[profile])
                extra["resources"] = {"mig": profile}
            else:
                want = draw(st.integers(1, 2))
                if len(free) < want:
                    continue
                gpus, free = free[:want], free[want:]
                binding = Binding(0, inst.id, tuple(gpus))
                extra["resources"] = {"gpus": want}
            state_j = JobState.DRAINING if state is InstanceState.DRAINING else JobState.RUNNING
            ckpt = T0 - timedelta(minutes=draw(st.integers(1, 90))) if draw(st.booleans()) else None
            jobs.append(job(f"r{k}-{r}", state=state_j, since=T0 - timedelta(hours=1), bindings=(binding,),
                            checkpoint_at=ckpt, **extra))  # fmt: skip
    for p in range(draw(st.integers(0, 12))):
        extra = {"priority": draw(st.sampled_from(PRIORITIES)), "tenant": draw(st.sampled_from(TENANTS)),
                 "resources": draw(resources()), "expected_duration": draw(st.sampled_from(["30m", "2h", "8h"]))}  # fmt: skip
        if draw(st.booleans()) and extra["priority"] == "normal":
            extra["deadline"] = (T0 + timedelta(hours=draw(st.integers(1, 30)))).isoformat()
        if draw(st.booleans()):
            extra["checkpoint"] = {"interval": "15m"}
        jobs.append(job(f"p{p}", created=T0 - timedelta(minutes=draw(st.integers(0, 600))), **extra))
    live = sum(i.offering.price_per_hour for i in instances if i.live)
    budgets: list[Budget] = []
    if draw(st.booleans()):
        budgets.append(Budget(live + draw(st.floats(0, 120))))
    if draw(st.booleans()):
        budgets.append(Budget(draw(st.floats(0, 150)), tenant="a"))
    return snapshot(jobs=jobs, instances=instances, offerings=POOL, budgets=tuple(budgets))


def _share(j: Job, o: Offering) -> float:
    r = j.spec.resources
    if r.mig:
        return MIG_PROFILES[r.mig] / 7 / o.gpu_count
    if r.gpu_fraction:
        return r.gpu_fraction / o.gpu_count
    return r.gpus / o.gpu_count if o.gpu_count else 0.0


def _after(snap: Snapshot, commands: list[Any]) -> tuple[dict[str, Offering], list[tuple[Job, Binding]]]:
    offerings = {i.id: i.offering for i in snap.instances.values() if i.live}
    placed = [(j, b) for j in snap.jobs.values() if j.state in (JobState.BOUND, JobState.RUNNING, JobState.DRAINING)
              for b in j.bindings]  # fmt: skip
    for c in commands:
        if isinstance(c, Launch):
            offerings[c.instance_id] = c.offering
        elif isinstance(c, Bind):
            placed.extend((snap.jobs[c.job_id], b) for b in c.bindings)
    return offerings, placed


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(snapshots())
def test_no_job_is_bound_without_room(snap: Snapshot) -> None:
    commands = SpotfleetPolicy().decide(snap)
    launched = {c.instance_id for c in commands if isinstance(c, Launch)}
    for c in commands:
        if isinstance(c, Bind):
            j = snap.jobs[c.job_id]
            assert j.state is JobState.PENDING
            assert len(c.bindings) == j.spec.resources.nodes
            assert len({b.instance_id for b in c.bindings}) == len(c.bindings)
            zones = set()
            for b in c.bindings:
                inst = snap.instances.get(b.instance_id)
                assert b.instance_id in launched or (inst is not None and inst.schedulable)
                zones.add(
                    inst.offering.zone
                    if inst
                    else next(
                        x.offering.zone for x in commands if isinstance(x, Launch) and x.instance_id == b.instance_id
                    )
                )
            assert len(zones) == 1
    offerings, placed = _after(snap, commands)
    whole: dict[tuple[str, int], int] = defaultdict(int)
    slices: dict[tuple[str, int], int] = defaultdict(int)
    mem: dict[tuple[str, int], float] = defaultdict(float)
    frac: dict[tuple[str, int], float] = defaultdict(float)
    for j, b in placed:
        o = offerings.get(b.instance_id)
        if o is None:
            continue  # bound to an instance already gone: not this plan's doing
        r = j.spec.resources
        for g in b.gpu_indices:
            assert 0 <= g < o.gpu_count
            key = (b.instance_id, g)
            if r.mig:
                assert is_mig_capable(o.gpu)
                slices[key] += MIG_PROFILES[r.mig]
                mem[key] += float(r.mig.split(".")[1].removesuffix("gb"))
            elif r.gpu_fraction:
                frac[key] += r.gpu_fraction
            else:
                whole[key] += 1
        if not r.mig and not r.gpu_fraction:
            assert len(b.gpu_indices) == r.gpus
    for key in set(whole) | set(slices) | set(frac):
        kinds = (whole[key] > 0) + (slices[key] > 0) + (frac[key] > 0)
        assert kinds <= 1, f"GPU {key} shared between kinds"
        assert whole[key] <= 1, f"GPU {key} bound twice"
        assert slices[key] <= 7, f"GPU {key} has {slices[key]} MIG slices"
        assert frac[key] <= 1.0 + 1e-9
        if slices[key]:
            assert mem[key] <= offerings[key[0]].gpu_memory_gib + 1e-9


@SETTINGS
@given(snapshots())
def test_no_non_interruptible_job_is_disrupted(snap: Snapshot) -> None:
    commands = SpotfleetPolicy().decide(snap)
    pinned_on: set[str] = set()
    for j in snap.jobs.values():
        if j.state in (JobState.BOUND, JobState.RUNNING, JobState.DRAINING) and not j.spec.is_interruptible:
            pinned_on.update(j.instance_ids)
    for c in commands:  # jobs this plan binds count too
        if isinstance(c, Bind) and not snap.jobs[c.job_id].spec.is_interruptible:
            pinned_on.update(b.instance_id for b in c.bindings)
    for c in commands:
        if isinstance(c, Terminate | Drain):
            assert c.instance_id not in pinned_on, c
        if isinstance(c, Terminate):
            assert all(j.state is JobState.PENDING for j in snap.jobs_on(c.instance_id))
            assert not any(isinstance(x, Bind) and c.instance_id in {b.instance_id for b in x.bindings}
                           for x in commands)  # fmt: skip
        if isinstance(c, Preempt):
            assert snap.jobs[c.job_id].spec.is_interruptible


@SETTINGS
@given(snapshots())
def test_spend_after_the_plan_is_within_every_budget(snap: Snapshot) -> None:
    commands = SpotfleetPolicy().decide(snap)
    before = sum(i.offering.price_per_hour for i in snap.instances.values() if i.live)
    after = before + sum(c.offering.price_per_hour for c in commands if isinstance(c, Launch))
    offerings, placed = _after(snap, commands)
    _, placed_before = _after(snap, [])

    def tenant_spend(pairs: list[tuple[Job, Binding]], tenant: str) -> float:
        return sum(offerings[b.instance_id].price_per_hour * _share(j, offerings[b.instance_id])
                   for j, b in pairs if j.spec.tenant == tenant and b.instance_id in offerings)  # fmt: skip

    for budget in snap.budgets:
        if budget.tenant is None:
            assert after <= max(budget.max_per_hour, before) + 1e-6
            if before > budget.max_per_hour:
                assert after == before
        else:
            was = tenant_spend(placed_before, budget.tenant)
            now = tenant_spend(placed, budget.tenant)
            assert now <= max(budget.max_per_hour, was) + 1e-6


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_plan_is_deterministic(snap: Snapshot) -> None:
    from spotfleet.model.snapshot import sequential_ids

    first = SpotfleetPolicy().decide(snap)
    snap.new_id = sequential_ids()
    assert SpotfleetPolicy().decide(snap) == first
