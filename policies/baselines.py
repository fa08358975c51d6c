"""Baseline policies the simulator measures spotfleet against.

Each is a ``Policy`` (``decide(snapshot) -> commands``) so the simulator runs it
through the same ``plan()`` and executor as spotfleet's own policy. All three
share one shape (``TargetPolicy``): per job, pick a *target* — spot in a zone,
on-demand in a zone, or nothing (wait) — then reconcile: launch and bind a
pending job onto fresh capacity for its target, drain an instance whose job
should move to another market, and give back every empty instance at once.

- ``on-demand``: never spot; the cheapest on-demand offering, from submission
  (every job, opportunistic ones included: it is the no-spot reference).
- ``greedy`` (the baseline of Can't Be Late, Wu et al., NSDI'24): spot whenever
  spot is available (the cheapest available zone), wait otherwise; switch to
  on-demand for good once the slack is gone, i.e. once waiting one more decision
  interval would leave less than the remaining work plus a restart.
- ``uniform-progress`` (Can't Be Late §5.2, single region), its four rules
  with ``cp(t)`` the work done and ``ep(t) = C·t/D`` the uniform-progress line
  of a job of ``C`` hours in a ``D``-hour window, ``d`` the restart delay:
  1. *uniform progress*: idle and ``cp(t) < ep(t)`` → on-demand;
  2. *taking risks*: spot whenever it is available, even when behind, and stay
     on it until it is preempted;
  3. *hysteresis*: on on-demand, stay until ``cp(t) ≥ ep(t + 2d)``;
  4. *safety net*: idle and ``R(t) < C(t) + 2d`` (time left < work left + 2d)
     → on-demand until the end.
  Single region: the region is fixed at the job's first spot launch (that of
  the cheapest spot available then); spot and on-demand are bought in its
  zones only.

- ``ups`` (SkyNomad, NSDI'27, its multi-region Uniform Progress "UP(S)"):
  the same four rules, but a spot request tries every region in one fixed
  order (sorted region, zone) and takes the first with spot, whichever region
  the job ran in before; on-demand is bought in the region the job last ran
  in (the first region in that order before it has run). Nothing is pinned.
  Written from the published artifact's description of the policy
  (``multi_region_rc_cr_threshold``), no code copied.

Work and progress come from the job: ``spec.expected_duration`` is ``C``,
``progress['done_s']`` (or ``fraction``) the work done, ``spec.deadline`` the
end of the window that starts at ``created_at``. A job without a deadline is
spot-only for greedy and uniform-progress; ``critical`` jobs are on-demand and
``opportunistic`` ones spot-only under every baseline.

Design choice: baselines keep no state except uniform-progress's pinned region
(a dict keyed by job id), so the decision is explainable from the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from spotfleet.model.instance import Instance, InstanceState
from spotfleet.model.job import ACTIVE_JOB_STATES, Binding, Job, JobState
from spotfleet.model.offering import Market, Offering
from spotfleet.model.snapshot import Bind, Command, Drain, Launch, Snapshot, Terminate
from spotfleet.model.spec import Priority

I = InstanceState  # noqa: E741


@dataclass(frozen=True, slots=True)
class Target:
    """Where a job should run now: a market, optionally pinned to a zone or a region."""

    market: Market
    zone: str | None = None
    reason: str = ""
    region: str | None = None


def done_hours(job: Job) -> float:
    """Work done so far (hours), from the job's reported progress."""
    done = job.progress.get("done_s")
    if isinstance(done, int | float):
        return max(float(done), 0.0) / 3600.0
    fraction = job.progress.get("fraction")
    if isinstance(fraction, int | float) and job.spec.expected_duration is not None:
        return max(0.0, min(1.0, float(fraction))) * job.spec.expected_duration.total_seconds() / 3600.0
    return 0.0


def work_hours(job: Job) -> float | None:
    d = job.spec.expected_duration
    return d.total_seconds() / 3600.0 if d is not None else None


def hours_left(job: Job, now: datetime) -> float | None:
    if job.spec.deadline is None:
        return None
    return (job.spec.deadline - now).total_seconds() / 3600.0


@dataclass
class TargetPolicy:
    """Shared reconcile loop; subclasses choose each job's ``Target``."""

    restart_hours: float = 0.2
    decision_interval_hours: float = 0.1  # how often the simulator steps (its tick)
    name: str = "target"
    moves_running_jobs: bool = False  # simulator hint: a running on-demand job stays put

    def target(self, job: Job, snapshot: Snapshot, *, current: Instance | None) -> Target | None:
        raise NotImplementedError

    # ------------------------------------------------------------ the loop

    def decide(self, snapshot: Snapshot) -> list[Command]:
        commands: list[Command] = []
        busy: set[str] = set()
        for job in sorted(snapshot.jobs.values(), key=lambda j: (j.created_at, j.id)):
            if job.terminal or job.cancel_requested:
                continue
            current = self._instance_of(job, snapshot)
            if job.state in ACTIVE_JOB_STATES:
                busy.update(b.instance_id for b in job.bindings)
            if job.state is JobState.DRAINING:
                continue
            target = self._constrained(job, self.target(job, snapshot, current=current))
            if job.state in (JobState.BOUND, JobState.RUNNING) and current is not None:
                if (
                    target is not None
                    and target.market is not current.market
                    and current.state in (I.PROVISIONING, I.RUNNING)
                ):
                    for inst_id in sorted({b.instance_id for b in job.bindings}):
                        commands.append(Drain(inst_id, reason=f"{self.name}: {target.reason}"))
                continue
            if job.state is JobState.PENDING and target is not None:
                commands.extend(self._place(job, snapshot, target))
        for inst in snapshot.instances.values():
            if inst.id not in busy and inst.state in (I.PROVISIONING, I.RUNNING):
                commands.append(Terminate(inst.id, reason=f"{self.name}: no job on it"))
        return commands

    def _constrained(self, job: Job, target: Target | None) -> Target | None:
        """Market rules every baseline honours (priority classes)."""
        if job.spec.priority is Priority.CRITICAL or not job.spec.is_interruptible:
            return Target(Market.ON_DEMAND, reason="critical: on-demand")
        if job.spec.priority is Priority.OPPORTUNISTIC and target is not None and target.market is Market.ON_DEMAND:
            return None
        return target

    def _instance_of(self, job: Job, snapshot: Snapshot) -> Instance | None:
        for b in job.bindings:
            inst = snapshot.instances.get(b.instance_id)
            if inst is not None:
                return inst
        return None

    def _place(self, job: Job, snapshot: Snapshot, target: Target) -> list[Command]:
        offering = self.offering_for(job, snapshot, target)
        if offering is None:
            return []
        commands: list[Command] = []
        bindings = []
        for rank in range(job.spec.resources.nodes):
            instance_id = f"{job.id}-a{job.attempt + 1}-n{rank}"
            commands.append(Launch(instance_id, offering, reason=f"{self.name}: {target.reason}"))
            gpus = tuple(range(job.spec.resources.gpus))
            bindings.append(Binding(rank, instance_id, gpus))
        commands.append(Bind(job.id, tuple(bindings), reason=f"{self.name}: {target.reason}"))
        return commands

    def offering_for(self, job: Job, snapshot: Snapshot, target: Target) -> Offering | None:
        """The cheapest usable offering for the target (spot: available right now)."""
        req = job.spec.node_requirements()
        pool = snapshot.usable_offerings().market(target.market).compatible(req)
        if target.market is Market.SPOT:
            pool = pool.available()
        if target.zone is not None:
            pool = pool.where(lambda o: o.zone == target.zone)
        if target.region is not None:
            pool = pool.where(lambda o: o.region == target.region)
        return pool.cheapest()

    def spot_available(self, job: Job, snapshot: Snapshot, *, region: str | None = None) -> bool:
        return self.offering_for(job, snapshot, Target(Market.SPOT, region=region)) is not None

    def out_of_slack(self, job: Job, now: datetime) -> bool:
        """Would waiting one more interval leave less than the work plus a restart?"""
        left, work = hours_left(job, now), work_hours(job)
        if left is None or work is None:
            return False
        remaining = max(work - done_hours(job), 0.0)
        return left - self.decision_interval_hours <= remaining + self.restart_hours


@dataclass
class OnDemandPolicy(TargetPolicy):
    """Never spot: the reference a spot policy is compared with, so even
    ``opportunistic`` jobs run (on on-demand) under it."""

    name: str = "on-demand"

    def target(self, job: Job, snapshot: Snapshot, *, current: Instance | None) -> Target | None:
        return Target(Market.ON_DEMAND, reason="on-demand only")

    def _constrained(self, job: Job, target: Target | None) -> Target | None:
        return target


@dataclass
class GreedyPolicy(TargetPolicy):
    """Spot whenever available, wait otherwise, on-demand once the slack is gone."""

    name: str = "greedy"

    def target(self, job: Job, snapshot: Snapshot, *, current: Instance | None) -> Target | None:
        if current is not None and current.market is Market.ON_DEMAND:
            return Target(Market.ON_DEMAND, reason="on-demand until done")
        if job.spec.deadline is not None and self.out_of_slack(job, snapshot.now):
            return Target(Market.ON_DEMAND, reason="slack exhausted: on-demand until done")
        if current is not None:
            return Target(Market.SPOT, reason="keep running on spot")
        if self.spot_available(job, snapshot):
            return Target(Market.SPOT, reason="spot available")
        return None  # wait for spot


@dataclass
class UniformProgressPolicy(TargetPolicy):
    """Can't Be Late's Uniform Progress, single region (see the module docstring)."""

    name: str = "uniform-progress"
    moves_running_jobs: bool = True  # back from on-demand to spot once ahead
    hysteresis_hours: float | None = None  # default 2d (the paper's)
    regions: dict[str, str] = field(default_factory=dict)  # job id -> pinned region

    def target(self, job: Job, snapshot: Snapshot, *, current: Instance | None) -> Target | None:
        now = snapshot.now
        region = self.regions.get(job.id)
        work = work_hours(job)
        if job.spec.deadline is None or work is None:
            return self._spot(job, snapshot, region, current, reason="no deadline: spot only")
        done = done_hours(job)
        if current is not None and current.market is Market.SPOT:
            return Target(Market.SPOT, region=region, reason="exploitation: stay on spot until preempted")
        if self.safety_net(job, now):
            return Target(Market.ON_DEMAND, region=region, reason="safety net: on-demand until done")
        if current is not None:  # on on-demand
            ahead = done >= self.expected_done(job, now + timedelta(hours=self.hysteresis(job)))
            if ahead and self.spot_available(job, snapshot, region=region):
                return self._spot(job, snapshot, region, current, reason="hysteresis met: back to spot")
            return Target(Market.ON_DEMAND, region=region, reason="hysteresis: on-demand until cp(t) ≥ ep(t + 2d)")
        if self.spot_available(job, snapshot, region=region):
            return self._spot(job, snapshot, region, current, reason="taking risks: spot is available")
        expected = self.expected_done(job, now)
        if done < expected:
            return Target(
                Market.ON_DEMAND, region=region, reason=f"behind uniform progress ({done:.2f} < {expected:.2f} h)"
            )
        return None  # idle: no spot, ahead of the line

    def hysteresis(self, job: Job) -> float:
        """Hours ahead in time the line must be met before leaving on-demand (2d)."""
        return self.hysteresis_hours if self.hysteresis_hours is not None else 2 * self.restart_hours

    def safety_net(self, job: Job, now: datetime) -> bool:
        """``R(t) < C(t) + 2d`` (one decision interval early, as decisions are per tick)."""
        left, work = hours_left(job, now), work_hours(job)
        if left is None or work is None:
            return False
        remaining = max(work - done_hours(job), 0.0)
        return left - self.decision_interval_hours < remaining + 2 * self.restart_hours

    def expected_done(self, job: Job, now: datetime) -> float:
        """``C·t/D``: where uniform progress says the job should be by now."""
        work = work_hours(job) or 0.0
        assert job.spec.deadline is not None
        window = (job.spec.deadline - job.created_at).total_seconds()
        elapsed = (now - job.created_at).total_seconds()
        return work * min(max(elapsed / window, 0.0), 1.0) if window > 0 else work

    def _spot(
        self,
        job: Job,
        snapshot: Snapshot,
        region: str | None,
        current: Instance | None,
        *,
        reason: str,
    ) -> Target | None:
        if region is None:
            offering = self.offering_for(job, snapshot, Target(Market.SPOT))
            if offering is None:
                return None
            region = offering.region
        if current is None and not self.spot_available(job, snapshot, region=region):
            return None
        self.regions.setdefault(job.id, region)
        return Target(Market.SPOT, region=region, reason=reason)


@dataclass
class MultiRegionUniformProgressPolicy(UniformProgressPolicy):
    """SkyNomad's UP(S): Uniform Progress whose spot is any region's, tried in a
    fixed order (see the module docstring); on-demand where the job last ran."""

    name: str = "ups"
    last_region: dict[str, str] = field(default_factory=dict)  # job id -> region it last ran in

    def target(self, job: Job, snapshot: Snapshot, *, current: Instance | None) -> Target | None:
        if current is not None:
            self.last_region[job.id] = current.offering.region
        self.regions.pop(job.id, None)  # never pinned
        found = super().target(job, snapshot, current=current)
        if found is None or found.market is Market.SPOT:
            return found
        region = self.last_region.get(job.id) or self._first_region(job, snapshot, Market.ON_DEMAND)
        return Target(Market.ON_DEMAND, region=region, reason=found.reason)

    def _place(self, job: Job, snapshot: Snapshot, target: Target) -> list[Command]:
        offering = self.offering_for(job, snapshot, target)
        if offering is not None:
            self.last_region[job.id] = offering.region  # where its checkpoint will be
        return super()._place(job, snapshot, target)

    def offering_for(self, job: Job, snapshot: Snapshot, target: Target) -> Offering | None:
        """Spot: the first zone with spot in the fixed (region, zone) order, not the cheapest."""
        if target.market is not Market.SPOT or target.zone is not None or target.region is not None:
            return super().offering_for(job, snapshot, target)
        req = job.spec.node_requirements()
        pool = list(snapshot.usable_offerings().market(Market.SPOT).compatible(req).available())
        return min(pool, key=lambda o: (o.region, o.zone, o.price_per_hour), default=None)

    def _spot(
        self,
        job: Job,
        snapshot: Snapshot,
        region: str | None,
        current: Instance | None,
        *,
        reason: str,
    ) -> Target | None:
        if current is not None:  # riding spot: stay where it is
            return Target(Market.SPOT, region=current.offering.region, reason=reason)
        if not self.spot_available(job, snapshot):
            return None
        return Target(Market.SPOT, reason=reason)

    def _first_region(self, job: Job, snapshot: Snapshot, market: Market) -> str | None:
        req = job.spec.node_requirements()
        regions = sorted({o.region for o in snapshot.usable_offerings().market(market).compatible(req)})
        return regions[0] if regions else None


BASELINES = {
    "on-demand": OnDemandPolicy,
    "greedy": GreedyPolicy,
    "uniform-progress": UniformProgressPolicy,
    "ups": MultiRegionUniformProgressPolicy,
}
