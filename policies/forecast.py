"""Forecasts from history: durations, peak memory, throughput and spot hazard.

The predictive part of the planner. Everything is learned from records the
controller passes in the snapshot (``Snapshot.runs``, ``Snapshot.exposure``),
never read from the store here, and is used only where the job spec is silent.

Interruption hazard (interruptions per instance-hour) is a Gamma–Poisson
estimate per spot pool: a prior rate ``λ₀`` worth ``S`` pseudo-hours of
exposure, updated with the pool's observed interruptions ``k`` over ``h``
hours: ``λ = (λ₀·S + k) / (S + h)``. A pool with no history gets the prior; a
pool seen for weeks gets (almost) its own rate. On-demand hazard is 0.

The priors were computed offline from the spot traces in the reference data
(``shared/data/traces``; not read at runtime) as interruptions per hour alive,
pooled over the zones of each trace:

- AWS 0.468/h: ``aws-v100-preemption-2023-04`` (Can't Be Late, NSDI'24 traces,
  skypilot-org/spot-traces), p3.2xlarge in 4 zones, 202 preemptions of running
  spot instances over 431.2 instance-hours (per zone 0.31–0.74/h).
- GCP 0.275/h: ``gcp-h100-2025-10`` (SkyNomad artifact), a3-highgpu-8g in 8
  zones, 624 available→unavailable transitions over 2,271.2 available hours
  (per zone 0.05–1.77/h). Availability loss stands in for preemption there.
- any other provider 0.310/h: ``aws-v100-2023-02`` availability trace, 1,278
  transitions over 4,118.3 available hours in 6 zones.

Spot *supply* (``SpotSupply``): how long spot stays buyable and how long it
stays gone, per pool and per instance type's market across zones, from what
the controller observed (``Snapshot.availability``). The estimate adds one
pseudo-run of the prior to the observed hours: ``PRIOR_UP_RUN_H`` up and
``PRIOR_DOWN_RUN_H`` down, the medians of the mean up and down run lengths of
the 18 zones of the reference traces (shared/data/traces: gcp-h100-2025-10,
aws-v100-2023-02, aws-v100-preemption-2023-04; per zone 0.6–19.4 h up and
0.3–4.5 h down). One run is a weak prior: a few hours of observation outweigh it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain, repeat

from spotfleet.model.offering import Market, Offering
from spotfleet.model.snapshot import PoolAvailability, PoolExposure, RunRecord, provider_of_key, spot_market_key

PRIOR_UP_RUN_H = 2.9
"""Prior mean available run of a spot pool (hours; see the module docstring)."""
PRIOR_DOWN_RUN_H = 1.15
"""Prior mean unavailable run of a spot pool (hours)."""


@dataclass(frozen=True, slots=True)
class SpotSupply:
    """Expected spot supply of a pool or market: the share of time it can be
    bought, the mean length of its available and unavailable runs (hours), and
    whether it is available now."""

    availability: float
    mean_up_h: float
    mean_down_h: float
    up_now: bool = True
    remaining_up_h: float = PRIOR_UP_RUN_H  # expected rest of the current up run, given its age

    @classmethod
    def observed(cls, record: PoolAvailability | None) -> SpotSupply:
        up, down, runs, now = PRIOR_UP_RUN_H, PRIOR_DOWN_RUN_H, 1.0, True
        remaining = PRIOR_UP_RUN_H
        if record is not None:
            seen_up, seen_down, ended = record.evidence()  # the log forgets: controller/availability.py
            up += seen_up
            down += seen_down
            runs += ended
            now = record.up_now
            remaining = remaining_life(record.recent_runs_h, record.up_for_h, record.recent_runs_weight)
        return cls(up / (up + down), up / runs, down / runs, now, remaining)


def remaining_life(runs_h: Iterable[float], age_h: float, weights: Iterable[float] = ()) -> float:
    """Expected remaining length of an up run that has lasted ``age_h``: the mean
    excess ``L − age`` over the recorded runs longer than ``age_h``, with one
    prior run whose excess is ``PRIOR_UP_RUN_H`` (exponential: memoryless).
    Empirical, so bursty pools — many blips, some long runs — come out short
    when just back up and long once a run has lasted (the mean residual life).
    ``weights``: one per run (older runs count less, ``PoolAvailability.recent_runs_weight``);
    none given, every run counts 1."""
    total, n = PRIOR_UP_RUN_H, 1.0
    for length, weight in zip(runs_h, chain(weights, repeat(1.0)), strict=False):  # weights padded with 1
        if length > age_h:
            total += weight * (length - age_h)
            n += weight
    return total / n


HAZARD_PRIOR_PER_HOUR: dict[str, float] = {"aws": 0.468, "gcp": 0.275}
DEFAULT_HAZARD_PRIOR = 0.310
PRIOR_STRENGTH_HOURS = 24.0
"""How many hours of observation the prior is worth (``S``)."""

MEMORY_HEADROOM = 1.10
"""A forecast peak GPU memory is padded by 10 % before it becomes a requirement."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """What history says; built once per plan from the snapshot's records."""

    durations_s: dict[str, float] = field(default_factory=dict)  # family -> median successful run
    peak_memory_gib: dict[str, float] = field(default_factory=dict)  # family -> max observed
    throughput: dict[str, dict[str, float]] = field(default_factory=dict)  # family -> GPU -> work/GPU-hour
    pool_hazard: dict[str, float] = field(default_factory=dict)  # offering key -> posterior /h
    availability: dict[str, PoolAvailability] = field(default_factory=dict)  # pool or market key -> seen
    prior_strength_hours: float = PRIOR_STRENGTH_HOURS
    prior_per_hour: float | None = None  # one hazard prior for every pool (Knobs.hazard_prior_per_h); None: per cloud

    @classmethod
    def from_history(
        cls,
        runs: Iterable[RunRecord] = (),
        exposure: Iterable[PoolExposure] = (),
        availability: Iterable[PoolAvailability] = (),
        *,
        prior_strength_hours: float = PRIOR_STRENGTH_HOURS,
        prior_per_hour: float | None = None,
    ) -> Forecast:
        durations: dict[str, list[float]] = defaultdict(list)
        peaks: dict[str, float] = {}
        work: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
        for run in runs:
            if run.succeeded and run.duration_s > 0:
                durations[run.family].append(run.duration_s)
            if run.peak_gpu_memory_gib is not None:
                peaks[run.family] = max(peaks.get(run.family, 0.0), run.peak_gpu_memory_gib)
            if run.work is not None and run.work > 0 and run.duration_s > 0 and run.gpus > 0:
                acc = work[run.family][run.gpu.upper()]
                acc[0] += run.work
                acc[1] += run.gpus * run.duration_s / 3600.0
        pools: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for exp in exposure:
            acc2 = pools[exp.pool]
            acc2[0] += exp.interruptions
            acc2[1] += exp.hours
        hazard = {
            pool: _posterior(hazard_prior(provider_of_key(pool), prior_per_hour), k, h, prior_strength_hours)
            for pool, (k, h) in pools.items()
        }
        return cls(
            durations_s={f: statistics.median(v) for f, v in durations.items()},
            peak_memory_gib=peaks,
            throughput={f: {g: w / gh for g, (w, gh) in per.items() if gh > 0} for f, per in work.items()},
            pool_hazard=hazard,
            availability={a.key: a for a in availability},
            prior_strength_hours=prior_strength_hours,
            prior_per_hour=prior_per_hour,
        )

    def hazard(self, offering: Offering) -> float:
        """Expected interruptions per instance-hour in ``offering``'s pool."""
        if offering.market is Market.ON_DEMAND:
            return 0.0
        found = self.pool_hazard.get(offering.key)
        if found is not None:
            return found
        return hazard_prior(offering.provider, self.prior_per_hour)

    def market_supply(self, offering: Offering) -> SpotSupply:
        """Spot supply of ``offering``'s instance type in any zone (what a job free
        to use every zone of that type waits for)."""
        return SpotSupply.observed(self.availability.get(spot_market_key(offering)))

    def pool_supply(self, offering: Offering) -> SpotSupply:
        return SpotSupply.observed(self.availability.get(offering.key))

    def duration_s(self, family: str) -> float | None:
        return self.durations_s.get(family)

    def memory_requirement_gib(self, family: str) -> float | None:
        """Forecast peak memory with headroom, or ``None`` without history."""
        peak = self.peak_memory_gib.get(family)
        return None if peak is None else peak * MEMORY_HEADROOM

    def family_throughput(self, family: str) -> dict[str, float]:
        return self.throughput.get(family, {})


def hazard_prior(provider: str, override: float | None = None) -> float:
    """The hazard prior of a pool of ``provider``: ``override`` when one is set
    (``Knobs.hazard_prior_per_h``), else the cloud's from the reference traces."""
    return override if override is not None else HAZARD_PRIOR_PER_HOUR.get(provider, DEFAULT_HAZARD_PRIOR)


def _posterior(prior: float, interruptions: float, hours: float, strength: float) -> float:
    return (prior * strength + interruptions) / (strength + hours)
