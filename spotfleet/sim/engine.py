"""The discrete-event loop: the real controller, a simulated cloud, simulated agents.

Each wake-up at virtual time ``T`` does, in order:

1. submit the jobs that have arrived by ``T`` (``Controller.submit``);
2. settle instances the cloud reclaimed since the last wake-up (their jobs keep
   what they checkpointed, see ``agents``);
3. every live instance's agent heartbeats its jobs' state to the controller;
4. ``Controller.step()`` — observe, ``plan()`` with the chosen policy, execute
   against ``SimProvider`` (the same code path as production);
5. agents heartbeat again, so new instances register and new assignments start
   (or receive drain orders) at ``T``.

Then the clock jumps to the next moment anything can happen: the next trace tick
while some job waits or some instance is idle or draining (policies decide on
time there), while a deadline job runs on spot with a save longer than the
notice (the work a reclaim would lose grows), or while it runs on spot and a
cheaper spot pool of its instance type is open (a move there may pay as time
passes), otherwise the next tick where the traces change; any provider event
(a notice becoming due, a reclaim), any job event (restart delay over, work
done, a requested save written), the next
arrival. A 120 s notice is therefore seen when it is given, not at the next
195 s tick.

Design choice: the store is an in-memory SQLite database migrated like
production, and nothing here reads the wall clock, so a run is deterministic:
the same inputs give the same costs and timelines (ids aside).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from spotfleet.clock import FakeClock
from spotfleet.controller.agents import Unauthorized
from spotfleet.controller.controller import Controller
from spotfleet.controller.settings import PlanSettings
from spotfleet.model.instance import InstanceState
from spotfleet.model.job import Job, JobState
from spotfleet.model.notice import spot_notice_seconds
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Snapshot, sequential_ids
from spotfleet.model.spec import JobSpec
from spotfleet.policies.base import Policy
from spotfleet.providers.base import CloudState
from spotfleet.sim.agents import JobTrack, SimAgent
from spotfleet.sim.provider import Bill, SimProvider
from spotfleet.sim.traces import TraceSet, availability_history
from spotfleet.store.store import Store
from spotfleet.wire import Heartbeat, HeartbeatResponse, RegisterRequest

I = InstanceState  # noqa: E741


@dataclass(frozen=True, slots=True)
class WorkItem:
    """A job the simulation submits at ``arrival``; it needs ``work_seconds`` of work."""

    spec: JobSpec
    arrival: datetime
    work_seconds: float


@dataclass(frozen=True, slots=True)
class SimSettings:
    restart_seconds: float = 720.0  # non-productive paid time at every (re)start
    checkpoint_seconds: float = 30.0  # time to write a checkpoint when asked to drain
    skip_quiet: bool = True  # jump over ticks where nothing can change (see the module docstring)
    catalog_on_demand: bool = False  # offer catalog instance types the traces do not cover
    plan: PlanSettings = field(default_factory=PlanSettings)
    # Moving a checkpointable job's state between regions or clouds: every
    # attempt that resumes saved progress in another (cloud, region) than the
    # one its checkpoint was written in pays ``checkpoint_gb`` × the egress rate
    # (the policy knobs' list prices). 0 = free moves (the round-1 model).
    checkpoint_gb: float = 0.0
    egress_inter_region_per_gib: float = 0.02
    egress_internet_per_gib: float = 0.09
    # Hours of the traces before the start that the controller is taken to have
    # watched already (``AvailabilityLog.replay``): a long-running controller
    # knows its markets' run lengths; 0 = a controller started with the job.
    history_hours: float = 0.0

    def egress_rate(self, src: tuple[str, str], dst: tuple[str, str]) -> float:
        """USD/GiB from checkpoint location ``src`` to ``dst`` ((cloud, region) each)."""
        if src == dst:
            return 0.0
        return self.egress_inter_region_per_gib if src[0] == dst[0] else self.egress_internet_per_gib


@dataclass(frozen=True, slots=True)
class JobOutcome:
    name: str
    job_id: str
    arrival: datetime
    deadline: datetime | None
    finished_at: datetime | None
    state: str
    work_seconds: float
    done_seconds: float
    starts: int
    interruptions: int
    lost_seconds: float

    @property
    def missed_deadline(self) -> bool:
        if self.deadline is None:
            return False
        return self.finished_at is None or self.finished_at > self.deadline


@dataclass(slots=True)
class SimResult:
    policy: str
    start: datetime
    end: datetime
    jobs: list[JobOutcome]
    bills: list[Bill]
    steps: int
    reclaims: int
    cost_curve: list[tuple[datetime, float]]
    on_demand_cost: float  # the same work on on-demand, one start per job (the reference line)
    on_demand_runs: list[tuple[datetime, float, float]] = field(default_factory=list)  # (from, seconds, USD/h)
    egress: list[tuple[datetime, str, float]] = field(default_factory=list)  # (when, job id, USD): checkpoint moves

    def on_demand_spent(self, at: datetime) -> float:
        """The reference line: what on-demand from each arrival would have cost by ``at``."""
        total = 0.0
        for begin, seconds, rate in self.on_demand_runs:
            ran = min(max((at - begin).total_seconds(), 0.0), seconds)
            total += rate * ran / 3600.0
        return total

    @property
    def cost(self) -> float:
        return sum(b.cost for b in self.bills) + self.egress_cost

    @property
    def egress_cost(self) -> float:
        """USD paid to move checkpoints between regions/clouds (``SimSettings.checkpoint_gb``)."""
        return sum(usd for _, _, usd in self.egress)

    @property
    def deadline_misses(self) -> int:
        return sum(1 for j in self.jobs if j.missed_deadline)

    @property
    def unfinished(self) -> int:
        return sum(1 for j in self.jobs if j.finished_at is None)

    @property
    def interruptions(self) -> int:
        return sum(j.interruptions for j in self.jobs)

    @property
    def instance_hours(self) -> float:
        return sum(b.seconds for b in self.bills) / 3600.0

    @property
    def spot_share(self) -> float:
        """Share of paid instance-hours that were spot."""
        total = sum(b.seconds for b in self.bills)
        return sum(b.seconds for b in self.bills if b.market is Market.SPOT) / total if total else 0.0

    def gpu_hours_paid(self, gpus_of: dict[str, int]) -> float:
        return sum(b.seconds * gpus_of.get(b.instance_type, 1) for b in self.bills) / 3600.0

    def to_dict(self, *, gpus_of: dict[str, int] | None = None, gpu_hours_used: float | None = None) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "cost": round(self.cost, 4),
            "on_demand_cost": round(self.on_demand_cost, 4),
            "deadline_misses": self.deadline_misses,
            "unfinished": self.unfinished,
            "interruptions": self.interruptions,
            "reclaims": self.reclaims,
            "spot_share": round(self.spot_share, 4),
            "instance_hours": round(self.instance_hours, 3),
            "gpu_hours_paid": round(self.gpu_hours_paid(gpus_of or {}), 3),
            "gpu_hours_used": round(gpu_hours_used, 3) if gpu_hours_used is not None else None,
            "steps": self.steps,
            "jobs": [
                {
                    "name": j.name,
                    "arrival": j.arrival.isoformat(),
                    "deadline": j.deadline.isoformat() if j.deadline else None,
                    "finished_at": j.finished_at.isoformat() if j.finished_at else None,
                    "state": j.state,
                    "work_hours": round(j.work_seconds / 3600, 4),
                    "starts": j.starts,
                    "interruptions": j.interruptions,
                    "lost_hours": round(j.lost_seconds / 3600, 4),
                    "missed_deadline": j.missed_deadline,
                }
                for j in self.jobs
            ],
            "instances": [
                {
                    "id": b.provider_id,
                    "zone": b.zone,
                    "instance_type": b.instance_type,
                    "market": b.market.value,
                    "start": b.launched_at.isoformat(),
                    "end": b.ended_at.isoformat() if b.ended_at else None,
                    "cost": round(b.cost, 4),
                    "reclaimed": b.reclaimed,
                }
                for b in self.bills
            ],
        }


class Simulation:
    """One run of ``work`` under ``policy`` over ``traces``, from ``start`` to at most ``end``."""

    def __init__(
        self,
        traces: TraceSet,
        work: Sequence[WorkItem],
        policy: Policy,
        *,
        start: datetime,
        end: datetime | None = None,
        settings: SimSettings | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.traces = traces
        self.work = sorted(work, key=lambda w: (w.arrival, w.spec.name))
        self.policy = policy
        self.settings = settings or SimSettings()
        self.start = start
        self.end = min(end, traces.end) if end is not None else traces.end
        self.clock = FakeClock(start)
        catalog = None
        if self.settings.catalog_on_demand:
            from spotfleet.catalog import load_catalog

            catalog = load_catalog()
        self.providers = {
            cloud: SimProvider(traces, clock=self.clock, name=cloud, clouds=[cloud], catalog=catalog)
            for cloud in sorted({z.cloud for z in traces.zones})
        }
        self.store = Store("sqlite://")
        self.store.migrate()
        self._tmp = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="spotfleet-sim-")
        self.controller = Controller(
            store=self.store,
            providers=self.providers,
            policy=policy,
            clock=self.clock,
            settings=self.settings.plan,
            data_dir=data_dir or Path(self._tmp.name if self._tmp else "."),
            controller_url=lambda: "sim://controller",  # the simulator plays the agents in process
            offerings_ttl=timedelta(0),
            new_id=sequential_ids(),
        )
        if self.settings.history_hours > 0:
            begin = traces.tick_at(start)
            ticks = math.ceil(self.settings.history_hours * 3600 / traces.tick_seconds)
            self.controller.availability.replay(availability_history(traces, first_tick=begin - ticks, end_tick=begin))
        self.tracks: dict[str, JobTrack] = {}
        self.items: dict[str, WorkItem] = {}
        self.agents: dict[tuple[str, str], SimAgent] = {}
        self.steps = 0
        self.egress: list[tuple[datetime, str, float]] = []
        self.checkpoint_at: dict[str, tuple[str, str]] = {}  # job id → (cloud, region) of its saved state
        self._restored: dict[str, int] = {}  # job id → the attempt whose restore was charged
        self.cost_curve: list[tuple[datetime, float]] = []
        self._changes = self._change_ticks()
        # A policy may declare it never moves a running on-demand job (the
        # baselines do), which lets the loop skip quiet ticks of such runs.
        self._moves_running = bool(getattr(policy, "moves_running_jobs", True))

    # ------------------------------------------------------------ the loop

    def run(self) -> SimResult:
        now = self.start
        arrivals = list(self.work)
        try:
            while True:
                self.clock.set(now)
                while arrivals and arrivals[0].arrival <= now:
                    self._submit(arrivals.pop(0))
                self._settle_reclaims(now)
                self._agents_round(now)
                report = self.controller.step()
                self.steps += 1
                if report.launched or self._awaiting_agents():
                    self._agents_round(now)
                self.cost_curve.append((now, self._cost(now)))
                if not arrivals and self._all_done():
                    break
                nxt = self._next_wake(now, arrivals)
                if nxt is None or nxt > self.end:
                    break
                now = nxt
            return self._result(now)
        finally:
            self.store.close()
            if self._tmp is not None:
                self._tmp.cleanup()

    def _submit(self, item: WorkItem) -> None:
        job = self.controller.submit(item.spec)
        interval = item.spec.checkpoint.interval
        self.items[job.id] = item
        self.tracks[job.id] = JobTrack(
            job_id=job.id,
            work=item.work_seconds,
            nodes=item.spec.resources.nodes,
            restart=self.settings.restart_seconds,
            interval=interval.total_seconds() if interval else None,
            checkpoint_seconds=self.settings.checkpoint_seconds,
        )

    def _settle_reclaims(self, now: datetime) -> None:
        """Instances that ended (reclaimed or terminated): their runs are over."""
        for key, agent in list(self.agents.items()):
            inst = self.providers[key[0]].instance(agent.provider_id)
            if inst.ended_at is not None and inst.ended_at <= now:
                for job_id, attempt, _ in agent.runs:
                    track = self.tracks[job_id]
                    if track.attempt == attempt:
                        track.end_attempt(inst.ended_at)
                del self.agents[key]

    def _agents_round(self, now: datetime) -> None:
        for cloud, provider in self.providers.items():
            for inst in provider.live():
                if provider.get(inst.provider_id).state is not CloudState.RUNNING:
                    continue
                key = (cloud, inst.provider_id)
                agent = self.agents.get(key)
                if agent is None:
                    agent = self.agents[key] = SimAgent(inst.provider_id, inst.agent_token)
                try:
                    if not agent.registered:
                        request = RegisterRequest(provider_id=inst.provider_id, gpus=inst.offering.gpu_count,
                                                  agent_version="sim")  # fmt: skip
                        response = self.controller.agents.register(agent.token, request)
                        agent.registered = True
                    else:
                        beat = Heartbeat(jobs=[self.tracks[j].status(r, now) for j, _, r in sorted(agent.runs)])
                        response = self.controller.agents.heartbeat(agent.token, beat)
                except Unauthorized:
                    continue  # the controller retired it; the provider is terminating it
                self._apply(agent, response, now, where=(cloud, inst.offering.region))

    def _apply(
        self, agent: SimAgent, response: HeartbeatResponse, now: datetime, *, where: tuple[str, str] = ("", "")
    ) -> None:
        wanted: set[tuple[str, int, int]] = set()
        for a in response.assignments:
            track = self.tracks.get(a.job_id)
            if track is None:
                continue
            wanted.add((a.job_id, a.attempt, a.node_rank))
            track.assign(a.attempt, a.node_rank, now)
            if a.node_rank == 0 and a.attempt == track.attempt and self._restored.get(a.job_id) != a.attempt:
                self._restored[a.job_id] = a.attempt
                self._move_checkpoint(a.job_id, track.saved, where, now)
            if a.drain is not None and track.attempt == a.attempt:
                track.drain(a.drain.deadline, now)
        for job_id, attempt, _ in agent.runs - wanted:
            track = self.tracks[job_id]
            if track.attempt == attempt:
                track.end_attempt(now)  # the controller moved on: the process is stopped
        agent.runs = wanted

    def _move_checkpoint(self, job_id: str, saved: float, where: tuple[str, str], now: datetime) -> None:
        """A new attempt restores the job's checkpoint at ``where``: charge the egress
        when saved progress has to cross a region or cloud boundary to get there."""
        src = self.checkpoint_at.get(job_id)
        self.checkpoint_at[job_id] = where
        gb = self.settings.checkpoint_gb
        if src is None or saved <= 0 or gb <= 0:
            return
        rate = self.settings.egress_rate(src, where)
        if rate > 0:
            self.egress.append((now, job_id, gb * rate))

    def _awaiting_agents(self) -> bool:
        """Did the step bind or drain a job (news the agents must hear at once)?"""
        plan = self.controller.last_plan
        if plan is None:
            return True
        return any(j.state in (JobState.BOUND, JobState.DRAINING) for j in plan.snapshot.jobs.values())

    def _all_done(self) -> bool:
        return all(t.finished_at is not None for t in self.tracks.values()) and not any(
            i.ended_at is None for p in self.providers.values() for i in p.live()
        )

    # ------------------------------------------------------------ when next

    def _change_ticks(self) -> np.ndarray:
        """Ticks at which any zone's availability or spot price changes."""
        avail = np.stack([z.available for z in self.traces.zones])
        price = np.stack([z.spot_price for z in self.traces.zones])
        changed = (np.diff(avail, axis=1) != 0).any(axis=0) | (np.diff(price, axis=1) != 0).any(axis=0)
        return np.flatnonzero(changed) + 1

    def _busy(self, now: datetime) -> bool:
        """Could a policy decide differently at the next tick than now?"""
        if not self.settings.skip_quiet:
            return True
        plan = self.controller.last_plan
        if plan is None:
            return True
        snap = plan.snapshot
        if any(j.state is not JobState.RUNNING for j in snap.jobs.values() if not j.terminal):
            return True
        hosting = {b.instance_id for j in snap.jobs.values() if not j.terminal for b in j.bindings}
        for job in snap.jobs.values():
            on_demand = any(
                (inst := snap.instances.get(b.instance_id)) is not None and inst.market is Market.ON_DEMAND
                for b in job.bindings
            )
            if on_demand and job.spec.deadline is not None and not job.terminal and self._moves_running:
                return True  # a deadline policy may move it back to spot as time passes
            if self._at_risk_on_spot(job, snap) and job.spec.deadline is not None and self._moves_running:
                return True  # the work a reclaim would throw away grows as time passes
            if job.spec.deadline is not None and self._moves_running and self._cheaper_spot_open(job, snap):
                return True  # a policy may move it to the cheaper pool as that pool's run ages
        for inst in snap.instances.values():
            if inst.live and (inst.state is not I.RUNNING or inst.id not in hosting):
                return True
        return any(
            t.started is None or (t.productive_from() or now) > now
            for t in self.tracks.values()
            if t.finished_at is None
        )

    def _at_risk_on_spot(self, job: Job, snap: Snapshot) -> bool:
        """Does ``job`` run on spot with a save longer than that cloud's notice?
        Then a reclaim throws away the work since its last checkpoint, which
        grows with every tick: a policy may leave spot for it at any tick, as the
        live controller, stepping every interval, would see."""
        track = self.tracks.get(job.id)
        if track is None or job.terminal:
            return False
        return any(
            inst is not None
            and inst.market is Market.SPOT
            and track.checkpoint_seconds > spot_notice_seconds(inst.offering.provider)
            for inst in (snap.instances.get(b.instance_id) for b in job.bindings)
        )

    def _cheaper_spot_open(self, job: Job, snap: Snapshot) -> bool:
        """Does ``job`` run on spot while a cheaper spot pool of the same
        instance type can be bought? Then a policy that migrates running jobs
        may move it at any tick, with nothing in the traces changing: what it
        has seen of that pool's current run, and the job's slack, change with
        time alone, and the live controller, stepping every interval, acts on
        them. Skipping such ticks once kept a job 48 h in a $2.00 zone after a
        $0.90 one came back (``bench/synthetic_markets.py``,
        cheaper-zone-returns)."""
        if job.terminal:
            return False
        for b in job.bindings:
            inst = snap.instances.get(b.instance_id)
            if inst is None or inst.market is not Market.SPOT:
                continue
            held = inst.offering
            spot = [o for o in snap.offerings if o.market is Market.SPOT and o.instance_type == held.instance_type]
            price = next((o.price_per_hour for o in spot if o.key == held.key), held.price_per_hour)  # as priced now
            if any(o.available and o.price_per_hour < price for o in spot):
                return True
        return False

    def _next_wake(self, now: datetime, arrivals: Sequence[WorkItem]) -> datetime | None:
        tick = self.traces.tick_at(now)
        candidates: list[datetime] = []
        if self._busy(now):
            candidates.append(self.traces.time_of(tick + 1))
        else:
            i = int(np.searchsorted(self._changes, tick, side="right"))
            if i < len(self._changes):
                candidates.append(self.traces.time_of(int(self._changes[i])))
        for provider in self.providers.values():
            when = provider.next_event_at()
            if when is not None:
                candidates.append(when)
        for track in self.tracks.values():
            candidates.extend(track.wakeups())
        if arrivals:
            candidates.append(arrivals[0].arrival)
        later = [c for c in candidates if c > now]
        if not later:
            return None
        return min(later)

    # ------------------------------------------------------------ results

    def _cost(self, now: datetime) -> float:
        return sum(p.cost(until=now) for p in self.providers.values()) + sum(usd for _, _, usd in self.egress)

    def _result(self, now: datetime) -> SimResult:
        runs = self._on_demand_reference()
        bills = [b for p in self.providers.values() for b in p.bills(until=now)]
        outcomes = []
        for job_id, item in self.items.items():
            track = self.tracks[job_id]
            job = self.store.get_job(job_id)
            outcomes.append(
                JobOutcome(
                    name=item.spec.name,
                    job_id=job_id,
                    arrival=item.arrival,
                    deadline=item.spec.deadline,
                    finished_at=track.finished_at,
                    state=job.state.value,
                    work_seconds=track.work,
                    done_seconds=track.saved,
                    starts=track.starts,
                    interruptions=job.interruptions,
                    lost_seconds=track.lost_seconds,
                )
            )
        return SimResult(
            policy=self.policy.name,
            start=self.start,
            end=now,
            jobs=outcomes,
            bills=bills,
            steps=self.steps,
            reclaims=sum(p.reclaims for p in self.providers.values()),
            cost_curve=self.cost_curve,
            on_demand_cost=sum(rate * seconds / 3600.0 for _, seconds, rate in runs),
            on_demand_runs=runs,
            egress=list(self.egress),
        )

    def _on_demand_reference(self) -> list[tuple[datetime, float, float]]:
        """Each job from its arrival: work plus one restart at the cheapest
        compatible on-demand price (per node)."""
        offers = [o for p in self.providers.values() for o in p.offerings().on_demand()]
        runs = []
        for item in self.items.values():
            req = item.spec.node_requirements()
            prices = [o.price_per_hour for o in offers if o.fits(req)]
            if prices:
                seconds = item.work_seconds + self.settings.restart_seconds
                runs.append((item.arrival, seconds, min(prices) * item.spec.resources.nodes))
        return runs
