"""Tuning knobs of the spotfleet policy, in one frozen dataclass.

Every number a policy decision depends on lives here with its default and why,
so ``docs/policies.md`` and a config file can name them. Durations are hours
(the unit prices are quoted in) unless the name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Knobs:
    # --- selection (expected cost per unit of useful work)
    restart_delay_h: float = 10 / 60
    """Time an interrupted job loses to get capacity, boot and restore (per interruption)."""
    default_duration_h: float = 1.0
    """Job length assumed when neither the spec nor history says (egress amortisation, lost work)."""
    egress_inter_region_per_gib: float = 0.02
    """USD/GiB between regions of one cloud (AWS inter-region and GCP NA list prices)."""
    egress_internet_per_gib: float = 0.09
    """USD/GiB leaving a cloud (AWS internet egress, first tier)."""
    hazard_prior_per_h: float | None = None
    """Interruptions per spot instance-hour a pool is assumed to have before it is observed
    (the Gamma–Poisson prior, ``forecast``). None = the per-cloud priors computed from the
    reference traces (``forecast.HAZARD_PRIOR_PER_HOUR``). The held-out protocol sets it to the
    rate pooled over the other trace sets, so no set is judged with a prior fitted to itself."""

    # --- market
    deadline_margin_h: float | None = None
    """Deadline slack margin (decision granularity, hysteresis band); None = derived: two
    decision intervals when known (``market.deadline_margin``), else one restart delay."""
    decision_interval_h: float | None = None
    """How late a market decision can be: the controller's step (the simulator passes its
    tick). Two of them are the derived deadline margin: between two decisions the slack
    falls by at most one step, and a move lands one step after it is ordered. None =
    unknown (the margin is then one restart delay)."""
    trust_notice_checkpoint: bool | None = None
    """Whether a reclaim notice is long enough for the job to checkpoint (the drain protocol),
    so a reclaim costs a restart, not the work since the last periodic checkpoint. None =
    derived per job and cloud: the job's ``checkpoint.duration`` against the cloud's notice
    (``market.notice_checkpoint_fits``; no duration given: it fits). True/False: for every job
    (False reserves the checkpoint interval, everything done without one, against a failed
    notice checkpoint)."""

    max_migrations_per_plan: int = 10
    """Planned moves of running spot jobs to a cheaper pool per plan (bounds plan time and churn)."""

    # --- capacity
    max_alternatives: int = 3
    """Substitute offerings carried on a Launch for the executor to try."""

    # --- scale-down
    idle_ttl_s: float = 300.0
    """Emptiness: an instance idle this long is given back."""
    consolidation_threshold_per_h: float = 1.0
    """Consolidate when savings per hour / disruption cost (USD) ≥ this (Karpenter 'Balanced')."""
    consolidation_max_utilization: float = 0.5
    """Only instances using at most this share of their GPUs are consolidation candidates."""
    consolidation_max_candidates: int = 20
    disruption_budget_fraction: float = 0.1
    """At most this share of live instances may be draining for consolidation at once."""
    disruption_budget_min: int = 1

    # --- preemption
    preemption_enabled: bool = True
    preemption_max_jobs: int = 50
    """Urgent jobs considered for preemption per plan (bounds work and disruption per step)."""
    preemptions_per_job_per_hour: int = 2
    """A job preempted this many times in the last hour is no longer a victim (no preemption storms)."""
    explain_top: int = 5
    """How many ranked offerings explain shows."""


DEFAULT_KNOBS = Knobs()
