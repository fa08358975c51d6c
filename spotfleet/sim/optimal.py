"""The omniscient optimum for one deadline job: the floor every policy is measured against.

Scenario (a): ``W`` seconds of work on one instance of the traces' type, due
``D`` seconds after start tick ``s``, allowed in several zones. The optimum
knows the whole trace in advance. Each tick it is in one state: idle, spot in
zone ``z`` (only at ticks where the zone has ``available ≥ nodes``), or
on-demand (always available; the cheapest zone's on-demand price, since that
price is constant and capacity unlimited no other on-demand zone can be better).
Every (re)start — leaving idle, changing zone or market, or resuming after a
reclaim — costs ``restart`` seconds of paid, non-productive time. Billing is
per second at the tick's price; the job stops paying the second it finishes.

Dynamic programming over ticks × progress × state. Progress is exact: it lives
on a grid of ``q = gcd(tick, restart, W, D)`` seconds (15 s for 195 s ticks and
a 0.2 h restart), so no rounding is involved.

Design choice — the restart is charged up front: starting a segment moves
progress to ``max(p − restart, −restart)`` and every tick then adds its full
length. For any segment at least ``restart`` long this is exactly the true
progress; for shorter segments it is never above the truth (they would have
made nothing), and such segments are dominated by idling anyway (same progress,
no cost), so the optimum of this accounting is the true optimum. The brute-force
test in tests/sim checks that claim on hand-made traces.

Checkpoint moves (``checkpoint_gb > 0``): the job's saved state lives in the
(cloud, region) of the attempt that wrote it, and an attempt that resumes
saved progress (progress > 0) in another (cloud, region) pays
``checkpoint_gb`` × the egress rate once, like the simulator
(``SimSettings.checkpoint_gb``). The state then carries that location: one
idle and one on-demand state per location (the location's cheapest on-demand
price) besides the spot zones, and a switch into a location adds the move's
price to the cheapest way to be anywhere else. Restore time is the restart
charge already paid by every (re)start. With ``checkpoint_gb == 0`` every
location is one, which is exactly the model above. That variant computes the
cost and finish time only (no schedule).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from spotfleet.model.offering import Market
from spotfleet.sim.traces import TraceSet

INF = math.inf
IDLE = "idle"


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of the optimal schedule in one (zone, market), ticks ``[start, end)``."""

    start_tick: int
    end_tick: int
    zone: str  # trace key; "" when idle
    market: Market | None  # None when idle
    cost: float
    seconds: float  # paid seconds (less than the ticks' span when the job ends mid-tick)


@dataclass(frozen=True, slots=True)
class OptimalResult:
    feasible: bool
    cost: float  # inf when infeasible
    finish_seconds: float  # seconds after the start tick when the work is done
    schedule: tuple[Segment, ...] = ()

    @property
    def spot_seconds(self) -> float:
        return sum(s.seconds for s in self.schedule if s.market is Market.SPOT)

    @property
    def restarts(self) -> int:
        return sum(1 for s in self.schedule if s.market is not None)


@dataclass(frozen=True, slots=True)
class _Problem:
    """The DP's inputs, in grid units."""

    keys: tuple[str, ...]  # spot zones (trace keys)
    od_key: str
    od_price: float
    spot_ok: npt.NDArray[np.bool_]  # (zones, ticks)
    spot_price: npt.NDArray[np.float64]  # (zones, ticks)
    tick_lengths: tuple[int, ...]  # seconds of each tick of the horizon (last may be shorter)
    q: int
    r_units: int
    w_units: int
    work: int
    restart: int


def optimal_single_job(
    traces: TraceSet,
    *,
    work_hours: float,
    deadline_hours: float,
    start_tick: int = 0,
    restart_hours: float = 0.2,
    zones: Sequence[str] = (),
    nodes: int = 1,
    with_schedule: bool = True,
    checkpoint_gb: float = 0.0,
    egress_inter_region_per_gib: float = 0.02,
    egress_internet_per_gib: float = 0.09,
) -> OptimalResult:
    """The cheapest way to do ``work_hours`` within ``deadline_hours`` of ``start_tick``.

    ``zones`` limits the zones (names or keys; default all); ``nodes`` is how
    many instances the job runs on at once (a gang, all in one zone): spot is
    usable where the zone has that many available, and every node is paid.
    Times are rounded to whole seconds. ``checkpoint_gb`` prices a move of the
    saved state across regions (same cloud) or clouds at the given $/GiB.
    """
    problem = _build(
        traces,
        work=round(work_hours * 3600),
        deadline=round(deadline_hours * 3600),
        restart=round(restart_hours * 3600),
        start_tick=start_tick,
        zones=zones,
        nodes=nodes,
    )
    if checkpoint_gb > 0:
        picked = traces.only(zones=zones) if zones else traces
        return _solve_located(
            problem,
            picked,
            nodes=nodes,
            move_usd=lambda a, b: (
                0.0
                if a == b
                else checkpoint_gb * (egress_inter_region_per_gib if a[0] == b[0] else egress_internet_per_gib)
            ),
        )
    return _solve(problem, start_tick=start_tick, with_schedule=with_schedule)


def _build(
    traces: TraceSet,
    *,
    work: int,
    deadline: int,
    restart: int,
    start_tick: int,
    zones: Sequence[str],
    nodes: int,
) -> _Problem:
    tick = round(traces.tick_seconds)
    if tick <= 0 or abs(tick - traces.tick_seconds) > 1e-6:
        raise ValueError(f"the optimum needs a whole-second tick, got {traces.tick_seconds}")
    picked = traces.only(zones=zones) if zones else traces
    if len(picked.instance_types()) != 1:
        raise ValueError(f"one instance type at a time, got {picked.instance_types()}")
    n_full, rest = divmod(deadline, tick)
    lengths = [tick] * n_full + ([rest] if rest else [])
    q = math.gcd(tick, restart, work, deadline) or 1
    cols = np.arange(start_tick, start_tick + len(lengths))
    inside = (cols >= 0) & (cols < traces.n_ticks)
    safe = np.clip(cols, 0, traces.n_ticks - 1)
    spot_ok = np.stack([(z.available[safe] >= nodes) & inside for z in picked.zones])
    spot_price = np.stack([z.spot_price[safe] for z in picked.zones]) * nodes  # a gang pays every node
    od = min(picked.zones, key=lambda z: (z.on_demand_price, z.key))
    return _Problem(
        keys=tuple(z.key for z in picked.zones),
        od_key=od.key,
        od_price=od.on_demand_price * nodes,
        spot_ok=spot_ok,
        spot_price=spot_price,
        tick_lengths=tuple(lengths),
        q=q,
        r_units=restart // q,
        w_units=work // q,
        work=work,
        restart=restart,
    )


def _solve(p: _Problem, *, start_tick: int, with_schedule: bool) -> OptimalResult:
    if p.work <= 0:
        return OptimalResult(True, 0.0, 0.0, ())
    z_count = len(p.keys)
    n_states = z_count + 2  # 0 idle, 1..Z spot, Z+1 on-demand
    od_state = z_count + 1
    R, P = p.r_units, p.r_units + p.w_units  # index k ↔ progress (k − R)·q seconds
    cost = np.full((n_states, P), INF)
    cost[0, R] = 0.0
    best = INF
    best_at: tuple[int, int, int, bool] | None = None  # (tick, state, source index, was switch)
    trail: list[tuple[npt.NDArray[np.int8], int, npt.NDArray[np.int8]]] = []
    progress_s = (np.arange(P) - R) * p.q  # seconds of progress at each index

    for i, length in enumerate(p.tick_lengths):
        lq = length // p.q
        m_arg = np.argmin(cost, axis=0)
        m = cost[m_arg, np.arange(P)]
        # Switching in: progress max(k − R, 0) after the up-front restart charge.
        j0 = int(np.argmin(m[: R + 1]))
        sw = np.full(P, INF)
        sw[0] = m[j0]
        sw[1 : P - R] = m[R + 1 :]
        new = np.full((n_states, P), INF)
        new[0] = m
        choice = np.zeros((n_states, P), dtype=np.int8) if with_schedule else None
        last = i == len(p.tick_lengths) - 1
        for s in range(1, n_states):
            if s == od_state:
                price = p.od_price
            else:
                if not p.spot_ok[s - 1, i]:
                    continue
                price = float(p.spot_price[s - 1, i])
            # Finishing within this tick, from staying (k) or from switching in (sw index).
            lo = max(P - lq, 0)
            for src, switched in ((cost[s], False), (sw, True)):
                paid = p.work - progress_s[lo:]
                cand = src[lo:] + price * paid / 3600.0
                if cand.size:
                    k = int(np.argmin(cand))
                    if cand[k] < best:
                        best = float(cand[k])
                        best_at = (i, s, lo + k, switched)
            if last or lq >= P:
                continue
            tick_cost = price * length / 3600.0
            stay = cost[s, : P - lq]
            come = sw[: P - lq]
            take_switch = come < stay
            new[s, lq:] = np.where(take_switch, come, stay) + tick_cost
            if choice is not None:
                choice[s, lq:] = take_switch.astype(np.int8)
        if with_schedule:
            trail.append((m_arg.astype(np.int8), j0, choice))  # type: ignore[arg-type]
        cost = new
    if best_at is None:
        return OptimalResult(False, INF, INF, ())
    finish = _finish_seconds(p, best_at)
    schedule = _schedule(p, trail, best_at, start_tick=start_tick) if with_schedule else ()
    return OptimalResult(True, best, finish, schedule)


def _finish_seconds(p: _Problem, at: tuple[int, int, int, bool]) -> float:
    i, _, k, _ = at
    paid = p.work - (k - p.r_units) * p.q
    return float(sum(p.tick_lengths[:i]) + paid)


def _schedule(
    p: _Problem,
    trail: list[tuple[npt.NDArray[np.int8], int, npt.NDArray[np.int8]]],
    at: tuple[int, int, int, bool],
    *,
    start_tick: int,
) -> tuple[Segment, ...]:
    """Walk the stored choices back from the finishing tick to the start.

    ``trail[t]`` holds tick ``t``'s argmin over states, the best pre-restart
    index for a switch landing at progress 0, and per (state, index) whether the
    state was entered by a switch rather than continued.
    """
    R = p.r_units
    i, s, k, switched = at
    states = [s]
    m_arg, j0, _ = trail[i]
    if switched:
        k = j0 if k == 0 else k + R
        s = int(m_arg[k])
    t = i - 1
    while t >= 0:  # (t, s, k): in state s during tick t, progress index k at its end
        states.append(s)
        m_arg, j0, choice = trail[t]
        if s == 0:
            s = int(m_arg[k])
        elif choice[s, k]:
            j = k - p.tick_lengths[t] // p.q
            k = j0 if j == 0 else j + R
            s = int(m_arg[k])
        else:
            k -= p.tick_lengths[t] // p.q
        t -= 1
    states.reverse()
    od_state = len(p.keys) + 1
    segments: list[Segment] = []
    last_i = len(states) - 1
    run_start = 0
    for idx in range(1, len(states) + 1):
        if idx <= last_i and states[idx] == states[run_start]:
            continue
        s = states[run_start]
        seconds = 0.0
        seg_cost = 0.0
        for t in range(run_start, idx):
            length = float(p.tick_lengths[t])
            if t == last_i:
                length = _finish_seconds(p, at) - sum(p.tick_lengths[:t])
            if s == 0:
                continue
            price = p.od_price if s == od_state else float(p.spot_price[s - 1, t])
            seconds += length
            seg_cost += price * length / 3600.0
        if s != 0:
            segments.append(
                Segment(
                    start_tick=start_tick + run_start,
                    end_tick=start_tick + idx,
                    zone=p.od_key if s == od_state else p.keys[s - 1],
                    market=Market.ON_DEMAND if s == od_state else Market.SPOT,
                    cost=seg_cost,
                    seconds=seconds,
                )
            )
        run_start = idx
    return tuple(segments)


def _solve_located(
    p: _Problem, traces: TraceSet, *, nodes: int, move_usd: Callable[[tuple[str, str], tuple[str, str]], float]
) -> OptimalResult:
    """The DP of ``_solve`` with the checkpoint's location in the state (cost and finish only).

    States: per location ``l`` an idle state, the spot zones (each in its
    location) and per location an on-demand state at that location's cheapest
    on-demand price. Leaving a state keeps the checkpoint where it was; entering
    a state at ``l`` with progress > 0 from location ``l'`` adds ``move_usd(l', l)``.
    """
    if p.work <= 0:
        return OptimalResult(True, 0.0, 0.0, ())
    locs = sorted({(z.cloud, z.region) for z in traces.zones})
    loc_of_zone = [locs.index((z.cloud, z.region)) for z in traces.zones]
    od_price = [min(z.on_demand_price for z in traces.zones if (z.cloud, z.region) == loc) * nodes for loc in locs]
    n_loc, n_zone = len(locs), len(p.keys)
    # state layout: [idle per loc] + [spot per zone] + [on-demand per loc]
    state_loc = list(range(n_loc)) + loc_of_zone + list(range(n_loc))
    n_states = len(state_loc)
    move = np.array([[move_usd(a, b) for b in locs] for a in locs])
    R, P = p.r_units, p.r_units + p.w_units
    cost = np.full((n_states, P), INF)
    cost[:n_loc, R] = 0.0  # nothing saved yet: where it "is" does not matter
    best, best_at = INF, None
    progress_s = (np.arange(P) - R) * p.q
    has_state = np.arange(P) > R  # progress > 0: a move pays egress
    for i, length in enumerate(p.tick_lengths):
        lq = length // p.q
        m_loc = np.stack([cost[[s for s in range(n_states) if state_loc[s] == li]].min(axis=0) for li in range(n_loc)])
        last = i == len(p.tick_lengths) - 1
        new = np.full((n_states, P), INF)
        sw_loc = []
        for li in range(n_loc):
            arrive = np.min(m_loc + np.where(has_state, 1.0, 0.0)[None, :] * move[:, li][:, None], axis=0)
            sw = np.full(P, INF)
            sw[0] = float(np.min(arrive[: R + 1]))
            sw[1 : P - R] = arrive[R + 1 :]
            sw_loc.append(sw)
            new[li] = m_loc[li]
        for s in range(n_loc, n_states):
            if s < n_loc + n_zone:
                z = s - n_loc
                if not p.spot_ok[z, i]:
                    continue
                price = float(p.spot_price[z, i])
            else:
                price = od_price[s - n_loc - n_zone]
            sw = sw_loc[state_loc[s]]
            lo = max(P - lq, 0)
            for src in (cost[s], sw):
                cand = src[lo:] + price * (p.work - progress_s[lo:]) / 3600.0
                if cand.size:
                    k = int(np.argmin(cand))
                    if cand[k] < best:
                        best, best_at = float(cand[k]), (i, lo + k)
            if last or lq >= P:
                continue
            new[s, lq:] = np.minimum(cost[s, : P - lq], sw[: P - lq]) + price * length / 3600.0
        cost = new
    if best_at is None:
        return OptimalResult(False, INF, INF, ())
    i, k = best_at
    finish = float(sum(p.tick_lengths[:i]) + p.work - (k - R) * p.q)
    return OptimalResult(True, best, finish, ())
