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

The log lives in the controller's memory: a restarted or newly elected
controller starts from the priors (``policies/forecast.py``) and relearns
within hours; the reclaim hazard (``PoolExposure``) is in the store.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from spotfleet.model.offering import Market, Offering
from spotfleet.model.snapshot import PoolAvailability, market_key_of

RECENT_RUNS = 256
"""Completed up runs kept per key: what the remaining-life estimate reads."""


@dataclass(slots=True)
class _Track:
    up: bool
    since: datetime
    up_since: datetime | None
    up_hours: float = 0.0
    down_hours: float = 0.0
    ended_runs: int = 0  # available → unavailable edges seen
    runs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_RUNS))  # hours, oldest first
    resumed: bool = False  # imported history ended here: the next observation starts a new run


class AvailabilityLog:
    """Time-weighted spot availability per pool and per market (see the module docstring)."""

    def __init__(self) -> None:
        self._tracks: dict[str, _Track] = {}

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
            if track.up:
                track.up_hours += hours
            else:
                track.down_hours += hours
            if track.up and not up:
                track.ended_runs += 1
                if track.up_since is not None:
                    track.runs.append((now - track.up_since).total_seconds() / 3600.0)
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
            out.append(PoolAvailability(key, t.up_hours, t.down_hours, t.ended_runs, t.up, tuple(t.runs), age))
        return tuple(out)
