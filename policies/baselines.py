"""Baseline policies the simulator measures spotfleet against.

Each is a ``Policy`` (``decide(snapshot) -> commands``) so the simulator runs it
through the same ``plan()`` and executor as spotfleet's own policy. All of them
share one shape (``TargetPolicy``): per job, pick a *target* — spot in a zone,
on-demand in a zone, or nothing (wait) — then reconcile: launch and bind a
pending job onto fresh capacity for its target, drain an instance whose job
should move to another market (for ``ucm``, also another zone), and give back
every empty instance at once.

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

- ``ups`` (SkyNomad, NSDI'27, its multi-region Uniform Progress "UP(S)",
  the paper's SkyPilot-style *eager failover*): the same four rules, but a
  spot request tries every zone with spot, cheapest current spot price first,
  with the zones of the region the job last ran in moved to the end (a reclaim
  there suggests the region is short of capacity); on-demand is bought in the
  region the job last ran in (the first region by name before it has run).
  Nothing is pinned. Written from the published artifact's policy
  (``multi_region_rc_cr_threshold_eager_failover``, the strategy its figures
  label UP(S)), no code copied. Before 2026-12 this baseline was the
  artifact's plain ``multi_region_rc_cr_threshold``, which tries zones in the
  order the traces are listed (ours: sorted by name): on a market whose first
  zone by name is always up at 70 % of on-demand that is 4.1× the optimum.

- ``ucm`` (SkyNomad, NSDI'27, its Unified Cost Model): each tick, price a unit of
  progress ``V`` and take the option with the best net value per hour, if it
  beats what the job does now. ``V`` is 1.2 × the cost per hour of a reference
  plan for the remaining work: an on-demand share (from where the recent
  progress rate, extended, meets the last line that makes the deadline with
  ``2d`` to spare) at the cheapest on-demand price, the rest from spot pools in
  order of ``p·L/(L−d)``, each supplying availability × time left × ``(L−d)/L``,
  the shortfall on on-demand. ``L`` is a pool's expected remaining lifetime:
  the mean residual life of the availability runs seen there, at the current
  run's age, capped at 2 h and at the time left. Options: wait (0); spot in a
  pool with spot now, ``(V·(L−d) − p·L)/L`` (no ``d`` where the job already
  is); on-demand, ``V − p``. A running job is drained to move to a better pool
  or market, never to wait. Simplified against the artifact
  (``unified_cost_model_risk``): availability comes from the snapshot every
  tick instead of hourly paid probes; an empirical mean residual life replaces
  its Nelson-Aalen/jitter/burst lifetime models; no migration penalty (egress,
  transfer time) and no VOI gating. The artifact's *environment* latches every
  policy but its oracle onto on-demand once the remaining work plus a restart
  no longer fits before the deadline (``MultiTraceEnv.maybe_trigger_safety_net``),
  so ``ucm`` does the same (``out_of_slack``, as greedy); before 2026-12 it had
  no such guard and missed deadlines the artifact's UCM cannot. Written from
  reading the artifact, no code copied; docs/simulator.md has the cross-check
  against its simulator.

Work and progress come from the job: ``spec.expected_duration`` is ``C``,
``progress['done_s']`` (or ``fraction``) the work done, ``spec.deadline`` the
end of the window that starts at ``created_at``. A job without a deadline is
spot-only for greedy and uniform-progress; ``critical`` jobs are on-demand and
``opportunistic`` ones spot-only under every baseline.

Design choice: baselines keep little state — uniform-progress's pinned region, UP(S)'s
last region (dicts keyed by job id) and UCM's per-pool availability runs and per-job
progress history (what it has observed) — so a decision is explainable from the
snapshot plus that history.
"""

from __future__ import annotations

import math
from collections import deque
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
                    and self.moves_away(target, current)
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

    def moves_away(self, target: Target, current: Instance) -> bool:
        """Should a running job leave ``current`` for ``target``? (a market change)"""
        return target.market is not current.market

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

    def out_of_slack(self, job: Job, now: datetime, *, in_hand_h: float = 0.0) -> bool:
        """Would waiting one more interval leave less than the work plus a restart
        (and ``in_hand_h`` more, e.g. a drain's checkpoint save)?"""
        left, work = hours_left(job, now), work_hours(job)
        if left is None or work is None:
            return False
        remaining = max(work - done_hours(job), 0.0)
        return left - self.decision_interval_hours - in_hand_h <= remaining + self.restart_hours


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
    """SkyNomad's UP(S): Uniform Progress whose spot is any region's, cheapest
    first with the region it last ran in last (eager failover, see the module
    docstring); on-demand where the job last ran."""

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
        commands = super()._place(job, snapshot, target)  # offering_for reads the region it ran in before
        for command in commands:
            if isinstance(command, Launch):
                self.last_region[job.id] = command.offering.region  # where its checkpoint will be
                break
        return commands

    def offering_for(self, job: Job, snapshot: Snapshot, target: Target) -> Offering | None:
        """Spot: the cheapest zone with spot now, those of the region the job last
        ran in only when no other region has spot (eager failover)."""
        if target.market is not Market.SPOT or target.zone is not None or target.region is not None:
            return super().offering_for(job, snapshot, target)
        req = job.spec.node_requirements()
        pool = list(snapshot.usable_offerings().market(Market.SPOT).compatible(req).available())
        last = self.last_region.get(job.id)
        return min(pool, key=lambda o: (o.region == last, o.price_per_hour, o.region, o.zone), default=None)

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


@dataclass
class _ZoneHistory:
    """What UCM has seen of one spot pool: its availability runs, tick by tick."""

    runs: list[tuple[datetime, datetime]] = field(default_factory=list)  # finished runs (reclaims)
    up_since: datetime | None = None  # start of the run in progress
    first_seen: datetime | None = None


@dataclass
class UnifiedCostModelPolicy(TargetPolicy):
    """SkyNomad's Unified Cost Model (UCM), simplified (see the module docstring)."""

    name: str = "ucm"
    moves_running_jobs: bool = True
    value_markup: float = 1.2  # V = 1.2 × the reference cost per hour of progress
    safety_net: set[str] = field(default_factory=set)  # job ids latched on on-demand by the deadline
    max_lifetime_hours: float = 2.0  # cap on a predicted spot lifetime
    availability_window_hours: float = 12.0
    progress_window_hours: float = 10.0
    zones: dict[tuple[str, str], _ZoneHistory] = field(default_factory=dict)  # (instance type, zone)
    progress: dict[str, deque[tuple[datetime, float]]] = field(default_factory=dict)  # job id -> (t, done h)
    _seen_at: datetime | None = None

    # ------------------------------------------------------------ observation

    def observe(self, snapshot: Snapshot) -> None:
        """Record every spot pool's availability once per tick (the policy's only history)."""
        now = snapshot.now
        if self._seen_at == now:
            return
        self._seen_at = now
        up: dict[tuple[str, str], bool] = {}
        usable = {o.key for o in snapshot.usable_offerings().market(Market.SPOT)}
        for o in snapshot.offerings.market(Market.SPOT):
            key = (o.instance_type, o.zone)
            up[key] = up.get(key, False) or o.key in usable
        for key, available in up.items():
            hist = self.zones.setdefault(key, _ZoneHistory(first_seen=now))
            if available and hist.up_since is None:
                hist.up_since = now
            elif not available and hist.up_since is not None:
                hist.runs.append((hist.up_since, now))
                hist.up_since = None

    def expected_lifetime(self, offering: Offering, now: datetime, hours_left_: float) -> float:
        """Expected remaining spot lifetime (h): the mean residual life of this pool's
        past runs at the current run's age, capped at 2 h and at the time left."""
        hist = self.zones.get((offering.instance_type, offering.zone))
        life = self.max_lifetime_hours
        if hist is not None and hist.runs:
            age = (now - hist.up_since).total_seconds() / 3600.0 if hist.up_since is not None else 0.0
            longer = [(e - s).total_seconds() / 3600.0 - age for s, e in hist.runs]
            longer = [x for x in longer if x > 0]
            # No past run outlived this one: expect one more tick, as a hazard tail would.
            life = sum(longer) / len(longer) if longer else self.decision_interval_hours
        return max(0.0, min(life, self.max_lifetime_hours, hours_left_))

    def availability(self, offering: Offering, now: datetime) -> float:
        """Fraction of the last 12 h (or of what was seen) this pool had spot."""
        hist = self.zones.get((offering.instance_type, offering.zone))
        if hist is None or hist.first_seen is None:
            return 0.0
        start = max(hist.first_seen, now - timedelta(hours=self.availability_window_hours))
        window = (now - start).total_seconds()
        if window <= 0:
            return 1.0 if hist.up_since is not None else 0.0
        runs = [*hist.runs, *([(hist.up_since, now)] if hist.up_since is not None else [])]
        up = sum(max(0.0, (min(e, now) - max(s, start)).total_seconds()) for s, e in runs)
        return min(1.0, up / window)

    # ------------------------------------------------------------ the value of progress

    def od_weight(self, job: Job, now: datetime) -> float:
        """Share of the remaining work the reference plan puts on on-demand: where the
        recent progress rate, extended, crosses the last line that still makes the
        deadline with 2 restarts to spare (0: far from it, 1: already past it)."""
        work, left = work_hours(job) or 0.0, hours_left(job, now)
        assert job.spec.deadline is not None and left is not None
        window = (job.spec.deadline - job.created_at).total_seconds() / 3600.0
        t = (now - job.created_at).total_seconds() / 3600.0
        done = done_hours(job)
        if t <= 0:
            return 0.0
        if abs(done - t) < 1e-9:
            return 0.5
        rate = self.recent_rate(job, now)
        if abs(rate - 1.0) < 1e-9:
            return 0.0
        cross = (rate * t - done + (work + 2 * self.restart_hours - window)) / (rate - 1.0)
        if cross >= window:
            return 0.0
        if cross <= 0:
            return 1.0
        return max(0.0, min(1.0, (window - cross) / max(left, 1e-9)))

    def recent_rate(self, job: Job, now: datetime) -> float:
        """Progress per hour over the last 10 h (since submission when younger)."""
        seen = self.progress.setdefault(job.id, deque())
        done = done_hours(job)
        if not seen or seen[-1][0] != now:
            seen.append((now, done))
        horizon = now - timedelta(hours=self.progress_window_hours)
        while len(seen) > 1 and seen[1][0] <= horizon:
            seen.popleft()
        start_t, start_done = (job.created_at, 0.0) if seen[0][0] > horizon else seen[0]
        start_t = max(start_t, job.created_at)
        span = (now - start_t).total_seconds() / 3600.0
        return max(0.0, min(1.0, (done - start_done) / span)) if span > 0 else 0.0

    def progress_value(self, job: Job, snapshot: Snapshot) -> float:
        """V ($ per hour of progress): 1.2 × the reference cost of finishing, where the
        reference plan puts the on-demand share at the cheapest on-demand price and
        fills the rest with spot pools in order of restart-adjusted price, each
        contributing availability × time left × its useful share of a lifetime."""
        now = snapshot.now
        work, left = work_hours(job) or 0.0, hours_left(job, now)
        assert left is not None
        remaining = max(work - done_hours(job), 0.0)
        if left <= 0:
            return math.inf
        if remaining <= 0:
            return 0.0
        req = job.spec.node_requirements()
        od = snapshot.offerings.market(Market.ON_DEMAND).compatible(req)
        c_od = min((o.price_per_hour for o in od), default=math.inf)
        d = self.restart_hours
        pools = []
        for o in snapshot.offerings.market(Market.SPOT).compatible(req):
            life = self.expected_lifetime(o, now, left)
            if life <= d:
                continue
            useful = (life - d) / life
            supply = self.availability(o, now) * left * useful
            if supply > 0:
                pools.append((o.price_per_hour / useful, supply))
        on_demand = self.od_weight(job, now) * remaining
        cost = on_demand * c_od
        to_fill = remaining - on_demand
        for price, supply in sorted(pools):
            take = min(supply, to_fill)
            if take <= 0:
                break
            cost += take * price
            to_fill -= take
        cost += max(to_fill, 0.0) * c_od
        return self.value_markup * cost / remaining

    def spot_value(self, V: float, offering: Offering, now: datetime, left: float, *, staying: bool) -> float:
        """Net value per hour of spot in a pool: V × useful hours − price × hours, over
        its expected lifetime (a job already on it pays no restart)."""
        life = self.expected_lifetime(offering, now, left)
        useful = life if staying else life - self.restart_hours
        if life <= 0 or useful <= 0:
            return -math.inf
        return (V * useful - offering.price_per_hour * life) / life

    # ------------------------------------------------------------ the decision

    def _net_fires(self, job: Job, now: datetime, current: Instance | None) -> bool:
        """The artifact's environment, not its policy, guarantees the deadline: once
        waiting one more step would leave less than the work plus a restart, on-demand
        until done (``out_of_slack``). Its drains are free; ours save a checkpoint
        first, so a job that is running also keeps that save's time in hand."""
        took = job.spec.checkpoint.duration if current is not None else None
        return self.out_of_slack(job, now, in_hand_h=took.total_seconds() / 3600 if took is not None else 0.0)

    def moves_away(self, target: Target, current: Instance) -> bool:
        return target.market is not current.market or (target.zone is not None and target.zone != current.offering.zone)

    def decide(self, snapshot: Snapshot) -> list[Command]:
        self.observe(snapshot)
        return super().decide(snapshot)

    def target(self, job: Job, snapshot: Snapshot, *, current: Instance | None) -> Target | None:
        now = snapshot.now
        left = hours_left(job, now)
        if left is None or work_hours(job) is None:  # no deadline: cheapest spot, wait otherwise
            if current is not None:
                return Target(current.market, zone=current.offering.zone, reason="no deadline: keep running")
            return Target(Market.SPOT, reason="no deadline: spot only") if self.spot_available(job, snapshot) else None
        if job.id in self.safety_net or self._net_fires(job, now, current):
            self.safety_net.add(job.id)
            if current is not None and current.market is Market.ON_DEMAND:
                return Target(Market.ON_DEMAND, zone=current.offering.zone, reason="safety net: on-demand until done")
            return Target(Market.ON_DEMAND, reason="safety net: on-demand until done")
        V = self.progress_value(job, snapshot)
        req = job.spec.node_requirements()
        here = current.offering if current is not None else None
        if here is None:
            now_value = 0.0
        elif here.market is Market.SPOT:
            now_value = self.spot_value(V, here, now, left, staying=True)
        else:
            now_value = V - here.price_per_hour
        options: list[tuple[float, str, Target]] = [(0.0, "", Target(Market.SPOT, reason="wait"))]
        usable = snapshot.usable_offerings().compatible(req)
        for o in usable.market(Market.SPOT).available():
            staying = here is not None and here.market is Market.SPOT and here.zone == o.zone
            value = self.spot_value(V, o, now, left, staying=staying)
            if value >= 0 and not staying:
                reason = f"ucm: spot in {o.zone} worth {value:.2f} $/h (V={V:.2f})"
                options.append((value, o.zone, Target(Market.SPOT, zone=o.zone, reason=reason)))
        for o in usable.market(Market.ON_DEMAND):
            value = V - o.price_per_hour
            if value >= 0 and not (here is not None and here.market is Market.ON_DEMAND and here.zone == o.zone):
                reason = f"ucm: on-demand in {o.zone} worth {value:.2f} $/h (V={V:.2f})"
                options.append((value, o.zone, Target(Market.ON_DEMAND, zone=o.zone, reason=reason)))
        best_value, _, best = max(options, key=lambda x: (x[0], x[2].market is Market.SPOT, x[1]))
        if here is not None and (best_value <= now_value or best.reason == "wait"):
            return Target(here.market, zone=here.zone, reason=f"ucm: keep ({now_value:.2f} $/h)")
        if best.reason == "wait" or best_value <= now_value:
            return None
        return best


BASELINES = {
    "on-demand": OnDemandPolicy,
    "greedy": GreedyPolicy,
    "uniform-progress": UniformProgressPolicy,
    "ups": MultiRegionUniformProgressPolicy,
    "ucm": UnifiedCostModelPolicy,
}
