"""What the controller has seen of spot availability: run lengths per pool and per market.

Each snapshot tells, for every spot pool, whether it can be bought now (the
provider's ``available`` flag and no recent capacity error). ``AvailabilityLog``
turns those observations into time: the interval since the previous observation
is credited to the state seen then (the controller observes at least every
step, and the simulator steps at every change of the traces), and an
available→unavailable edge ends an *up run*, whose length is kept (the last
``RECENT_RUNS``): spot availability is bursty — many short blips between long
runs — so how long a pool has been up says how much longer it will likely
stay (``forecast.SpotSupply.remaining_up_h``). Two keys are kept per observation:

- the pool (``Offering.key``: provider, market, type, zone);
- the market of an instance type across zones (``spot_market_key``): up while *any*
  zone of that type has spot. A deadline job that may use every zone waits
  for this one, so its down runs are the outages that cost the job slack.

Markets change within days, so the log *forgets*: besides the totals it keeps
the same hours and runs by the observed hour they fell in, each counting in
full for ``FULL_WEIGHT_H`` and then half as much every ``HALF_LIFE_H``; the
forecasts read the weighted figures. Age is counted in hours *observed*, not
on the wall clock: imported history of another period (``replay(detached=True)``)
is not aged by the gap between its end and the first live step.

The log lives in the controller's memory: a restarted or newly elected
controller starts from the priors (``policies/forecast.py``) and relearns
within hours; the reclaim hazard (``PoolExposure``) is in the store.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from spotfleet.model.offering import Market, Offering
from spotfleet.model.snapshot import PoolAvailability, market_key_of

RECENT_RUNS = 256
"""Completed up runs kept per key: what the remaining-life estimate reads."""

FULL_WEIGHT_H = 72.0
"""Hours of observation during which what was seen counts in full."""
HALF_LIFE_H = 24.0
"""After ``FULL_WEIGHT_H``, hours after which what was seen counts half again.

Design choice: markets change within days, and round 2 measured that a week
of history made both held-out sets dearer (docs/simulator.md, "A controller
that has watched its market"): what a pool did days ago was confidently
wrong. A log that forgot from the first hour (a 24 h half-life, no full-weight
window) fixed that but made every cold set dearer: within a job's own
window the runs seen are the best evidence there is, and forgetting them
only leaves the estimate noisier. So evidence counts in full for three days,
longer than any deadline window the benchmarks run (52–72 h), and then fades
with a one-day half-life. Neither figure was fitted to a trace."""


@dataclass(slots=True)
class _Track:
    up: bool
    since: datetime
    up_since: datetime | None
    up_hours: float = 0.0
    down_hours: float = 0.0
    ended_runs: int = 0  # available → unavailable edges seen
    runs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_RUNS))  # hours, oldest first
    run_ends: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_RUNS))  # ``seen_h`` at each run's end
    seen_h: float = 0.0  # hours observed (the clock that ages evidence; imported gaps do not count)
    young: deque[list[float]] = field(default_factory=deque)  # per observed hour: [hour, up h, down h, ended runs]
    old: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # folded hours (up, down, ended) at ``old_at``
    old_at: float = 0.0  # ``seen_h`` at which ``old`` has full weight (decays after)
    resumed: bool = False  # imported history ended here: the next observation starts a new run


class AvailabilityLog:
    """Time-weighted spot availability per pool and per market (see the module docstring)."""

    def __init__(self, *, full_weight_h: float = FULL_WEIGHT_H, half_life_h: float | None = HALF_LIFE_H) -> None:
        """``full_weight_h``, ``half_life_h``: see ``HALF_LIFE_H``; ``half_life_h=None`` never forgets."""
        self._tracks: dict[str, _Track] = {}
        self.full_weight_h = full_weight_h
        self.half_life_h = half_life_h

    def _decay(self, hours: float) -> float:
        """Weight left after ``hours`` of fading (1 without forgetting)."""
        return 1.0 if self.half_life_h is None else 0.5 ** (max(0.0, hours) / self.half_life_h)

    def _weight(self, age_h: float) -> float:
        """Weight of evidence ``age_h`` observed hours old."""
        return self._decay(age_h - self.full_weight_h)

    def _credit(self, track: _Track, hours: float, up: bool) -> None:
        """Add ``hours`` in state ``up`` to the hourly evidence, split at whole observed hours;
        fold hours older than the full-weight window into the fading sum."""
        at, end = track.seen_h, track.seen_h + hours
        while at < end:
            start = float(math.floor(at))
            upto = min(end, start + 1.0)
            if not track.young or track.young[-1][0] != start:
                track.young.append([start, 0.0, 0.0, 0.0])
            track.young[-1][1 if up else 2] += upto - at
            at = upto
        track.seen_h = end
        while track.young and end - (track.young[0][0] + 1.0) > self.full_weight_h:
            start, up_h, down_h, ended = track.young.popleft()
            fold_at = start + 1.0 + self.full_weight_h  # when this hour left the window
            kept = self._decay(fold_at - track.old_at)
            track.old = [track.old[0] * kept + up_h, track.old[1] * kept + down_h, track.old[2] * kept + ended]
            track.old_at = fold_at

    def _ended(self, track: _Track) -> None:
        """Count a run that ended now in the observed hour just credited (``_credit``)."""
        if not track.young:  # nothing credited yet: observations at one instant
            track.young.append([float(math.floor(track.seen_h)), 0.0, 0.0, 0.0])
        track.young[-1][3] += 1.0

    def observe(
        self,
        now: datetime,
        offerings: Iterable[Offering],
        unavailable: Mapping[str, datetime],
        held: Collection[str] = (),
    ) -> None:
        """Record the state of every spot pool at ``now``. ``held``: pools where
        our own spot instances run — up whatever the provider says of spare
        capacity (a pool whose only slot we hold is not an outage)."""
        pools: dict[str, bool] = {}
        for o in offerings:
            if o.market is not Market.SPOT:
                continue
            pools[o.key] = (o.available and unavailable.get(o.key, now) <= now) or o.key in held
        self.record(now, pools)

    def record(self, now: datetime, pools: Mapping[str, bool]) -> None:
        """Record that each spot pool (``Offering.key``) is up or down at ``now``;
        each instance type's market (``spot_market_key``) is up while any of its
        pools is. Observations must come in time order."""
        states: dict[str, bool] = {}
        for key, up in pools.items():
            states[key] = up
            market = market_key_of(key)
            states[market] = states.get(market, False) or up
        for key, up in states.items():
            track = self._tracks.get(key)
            if track is None:
                self._tracks[key] = _Track(up, now, now if up else None)
                continue
            if track.resumed:
                # history imported from elsewhere ends here: nothing is known of the
                # gap, so this observation starts a run of unknown age
                track.up, track.since, track.resumed = up, now, False
                track.up_since = now if up else None
                continue
            hours = max(0.0, (now - track.since).total_seconds() / 3600.0)
            self._credit(track, hours, track.up)
            if track.up:
                track.up_hours += hours
            else:
                track.down_hours += hours
            if track.up and not up:
                track.ended_runs += 1
                self._ended(track)
                if track.up_since is not None:
                    track.runs.append((now - track.up_since).total_seconds() / 3600.0)
                    track.run_ends.append(track.seen_h)
                track.up_since = None
            elif up and not track.up:
                track.up_since = now
            track.up, track.since = up, now

    def replay(self, observations: Iterable[tuple[datetime, Mapping[str, bool]]], *, detached: bool = False) -> int:
        """Learn from a history of observations (``(time, {pool key: up})``, in
        time order). Returns how many were replayed.

        ``detached``: the history is not followed by this log's next observation
        (an imported trace of another period): its runs and hours are kept, the
        run under way at its end is dropped, and the next observation starts
        afresh. Otherwise it continues into the next observation (the simulator
        replays the trace before its start)."""
        count = 0
        for when, pools in observations:
            self.record(when, pools)
            count += 1
        if detached:
            for track in self._tracks.values():
                track.resumed = True
                track.up_since = None
        return count

    def records(self, now: datetime | None = None) -> tuple[PoolAvailability, ...]:
        out = []
        for key, t in sorted(self._tracks.items()):
            age = 0.0
            if t.up and t.up_since is not None and now is not None:
                age = max(0.0, (now - t.up_since).total_seconds() / 3600.0)
            # evidence ages by the hours since the last observation too (none after imported history)
            since = 0.0 if now is None or t.resumed else max(0.0, (now - t.since).total_seconds() / 3600.0)
            seen = t.seen_h + since
            record = PoolAvailability(key, t.up_hours, t.down_hours, t.ended_runs, t.up, tuple(t.runs), age)
            if self.half_life_h is not None and (
                t.old_at > 0 or (t.young and self._weight(seen - (t.young[0][0] + 1.0)) < 1.0)
            ):
                # some evidence has faded (else the totals are the weighted figures, exactly)
                kept = self._decay(seen - t.old_at)
                weighted = [v * kept for v in t.old]
                for hour, up_h, down_h, ended in t.young:
                    w = self._weight(seen - (hour + 1.0))
                    weighted[0] += w * up_h
                    weighted[1] += w * down_h
                    weighted[2] += w * ended
                record = replace(record, recent_up_h=weighted[0], recent_down_h=weighted[1],
                                 recent_ended=weighted[2],
                                 recent_runs_weight=tuple(self._weight(seen - end) for end in t.run_ends))  # fmt: skip
            out.append(record)
        return tuple(out)
