"""The price of a deadline job's slack: how likely it runs out, and what an hour of it is worth.

A deadline job on spot spends *slack* (time left minus work left) on every
restart and every wait for capacity; when the slack is gone, the rest of the
work runs on on-demand. So an hour of slack spent now is worth, in
expectation, the on-demand premium of the hour it may later force:

    value per hour of slack  v = P(slack runs out) × (on-demand − spot price)

``outlook`` estimates ``P(slack runs out)`` from the job's own numbers and the
learned market, as a compound Poisson sum (no constants fitted to a trace):

- the remaining work ``W`` on spot meets ``N ~ Poisson(λ·W)`` reclaims, ``λ``
  the pool's hazard (``forecast.Forecast.hazard``);
- each costs a restart ``d``, plus, with probability ``q`` (the market's
  unavailable share: no zone left to go to), a wait for spot to return of
  mean ``m`` (the market's mean down run), taken as exponential;
- an idle job with no spot now first waits out the current outage (mean ``m``).

Mean and variance of that sum give a normal approximation; the probability
that it exceeds the slack the job may spend (its slack less the reserve that
keeps on-demand able to finish, ``market.DeadlineThresholds.start``) is the
pressure ``p``. Callers weigh actions by it:

- idle without spot: wait out the market's outage until it is ``outage_cutoff``
  old, then on-demand until spot returns — the cutoff that leaves the fewest
  hours to on-demand given the slack, the outage lengths the market showed and
  the reclaims the remaining work expects (``outage_cutoff``);
- a move between pools or markets costs its restart in slack, ``d × v``.

Design choice: a normal approximation of a compound Poisson is crude in the
tails, but the decision it drives only compares ``p`` to ½ and prices
restarts, where the mean and spread are what matter.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from spotfleet.policies.forecast import PRIOR_DOWN_RUN_H, SpotSupply


@dataclass(frozen=True, slots=True)
class SlackOutlook:
    """What the remaining slack of a deadline job is expected to face."""

    spendable_h: float  # slack the job may spend before on-demand must finish it
    need_mean_h: float  # expected slack a spot-only path still spends
    need_sd_h: float
    pressure: float  # P(need > spendable)
    value_per_h: float  # USD per hour of slack: pressure × (on-demand − spot) for the job's nodes
    reclaim_cost_h: float  # expected slack one reclaim costs (restart + wait for spot)
    outage_h: float  # mean wait for spot once the market has none (its mean down run)
    outage_cutoff_h: float = math.inf  # wait out an outage until it is this old, then on-demand (``outage_cutoff``)
    outage_age_h: float = 0.0  # how long the market's current outage has lasted

    def describe(self) -> str:
        return (f"slack to spend {self.spendable_h:.2f} h vs {self.need_mean_h:.2f} ± {self.need_sd_h:.2f} h "
                f"expected on spot (P(runs out) {self.pressure:.2f}, ${self.value_per_h:.2f} per hour of slack)")  # fmt: skip


def outlook(
    *,
    spendable_h: float,
    work_left_h: float,
    hazard_per_h: float,
    supply: SpotSupply,
    restart_h: float,
    premium_per_h: float,
    idle_without_spot: bool = False,
) -> SlackOutlook:
    """The slack outlook of a job with ``work_left_h`` to do on spot (see the module docstring).

    ``premium_per_h``: on-demand minus spot price for the job's nodes (USD/h)."""
    lam = max(0.0, hazard_per_h)
    d = max(0.0, restart_h)
    q = min(1.0, max(0.0, 1.0 - supply.availability))
    m = max(0.0, supply.mean_down_h)
    reclaims = lam * max(0.0, work_left_h)
    cost1 = d + q * m  # mean slack per reclaim
    cost2 = d * d + q * (2.0 * d * m + 2.0 * m * m)  # its second moment
    mean = reclaims * cost1
    var = reclaims * cost2
    if idle_without_spot:
        mean += d + m  # wait out this outage, then restart
        var += m * m
    sd = math.sqrt(var)
    if sd > 1e-9:
        pressure = 0.5 * math.erfc((spendable_h - mean) / (sd * math.sqrt(2.0)))
    else:
        pressure = 1.0 if mean > spendable_h else 0.0
    if spendable_h <= 0:
        pressure = 1.0
    cutoff = math.inf
    if idle_without_spot:
        cutoff = outage_cutoff(spendable_h=spendable_h, work_left_h=work_left_h, hazard_per_h=lam, supply=supply,
                               restart_h=d)  # fmt: skip
    return SlackOutlook(spendable_h, mean, sd, pressure, pressure * max(0.0, premium_per_h), cost1, m, cutoff,
                        supply.down_for_h if not supply.up_now else 0.0)  # fmt: skip


class OutageLengths:
    """The length ``L`` of a spot market's outages: the recorded down runs plus
    one prior run, exponential with mean ``PRIOR_DOWN_RUN_H`` (a weak prior, as
    in ``forecast.SpotSupply``). Gives ``E[min(L, τ)]`` and ``P(L > τ)`` by
    bisection on prefix sums, so a cutoff scan stays cheap at every step."""

    def __init__(self, runs_h: tuple[float, ...], prior_mean_h: float = PRIOR_DOWN_RUN_H) -> None:
        self.runs = sorted(max(0.0, r) for r in runs_h)
        self.prefix = [0.0]
        for r in self.runs:
            self.prefix.append(self.prefix[-1] + r)
        self.prior = prior_mean_h
        self.weight = 1.0 + len(self.runs)

    def longer(self, tau: float) -> float:
        """``P(L > τ)``."""
        above = len(self.runs) - bisect.bisect_right(self.runs, tau)
        return (math.exp(-tau / self.prior) + above) / self.weight

    def capped_mean(self, tau: float) -> float:
        """``E[min(L, τ)]``."""
        if math.isinf(tau):
            return (self.prior + self.prefix[-1]) / self.weight
        i = bisect.bisect_right(self.runs, tau)
        below = self.prefix[i] + tau * (len(self.runs) - i)
        return (self.prior * (1.0 - math.exp(-tau / self.prior)) + below) / self.weight

    def candidates(self) -> list[float]:
        """Cutoffs worth scoring: 0, every recorded length (the scores are piecewise
        linear between them but for the prior's smooth part), a geometric grid, ∞."""
        grid = [0.0, *(0.02 * 1.25**k for k in range(40))]
        step = max(1, len(self.runs) // 64)
        return sorted({*grid, *self.runs[::step], math.inf})


def outage_cutoff(*, spendable_h: float, work_left_h: float, hazard_per_h: float, supply: SpotSupply,
                  restart_h: float) -> float:  # fmt: skip
    """How old an outage of the whole spot market may get before an idle deadline
    job stops waiting for spot and runs on on-demand until spot returns.

    The job follows one cutoff ``τ`` for this and every later outage: wait up
    to ``τ``, then on-demand. Per outage that spends ``s(τ) = E[min(L, τ)] +
    d·P(L > τ)`` of slack (the wait, or the extra restart of the round trip
    through on-demand) and runs ``o(τ) = E[(L − τ)⁺]`` hours on on-demand. Per
    hour of work on spot the market ends ``ν = 1/mean up run`` outages and the
    pool ``λ`` reclaims (a restart ``d`` each), so the slack buys
    ``S / (λd + ν·s(τ))`` hours on spot before it is gone, and the remaining
    work ``W`` needs ``W / (1 + ν·o(τ))`` of them (the rest run on on-demand
    during outages). The hours on spot are the smaller of the two; ``τ`` is
    chosen to make them most (ties: the longest wait). Every hour not on spot
    runs on on-demand, so this is the cutoff that buys the least on-demand.

    Plenty of slack gives ``τ = ∞`` (wait out every outage); slack short of the
    reclaims alone gives the cutoff whose outages spend the least slack —
    usually ``0``: on-demand at once. Between the two it waits out the short
    outages and covers the long ones on on-demand, as a hindsight schedule
    does. No constant: the outage lengths are what the market showed."""
    lengths = OutageLengths(supply.down_runs_h)
    nu = 1.0 / max(supply.mean_up_h, 1e-6)
    work = max(0.0, work_left_h)
    spend = max(0.0, spendable_h)
    best, best_tau = -1.0, 0.0
    for tau in lengths.candidates():
        per_outage = lengths.capped_mean(tau) + restart_h * lengths.longer(tau)
        rate = hazard_per_h * restart_h + nu * per_outage
        afford = spend / rate if rate > 0 else math.inf
        over = 0.0 if math.isinf(tau) else lengths.capped_mean(math.inf) - lengths.capped_mean(tau)
        needed = work / (1.0 + nu * over)
        hours = min(afford, needed)
        if hours >= best - 1e-9:
            best, best_tau = hours, tau
    return best_tau


def return_to_spot_pays(
    outlook: SlackOutlook,
    *,
    premium_per_h: float,
    spot_price: float,
    hazard_per_h: float,
    work_left_h: float,
    restart_h: float,
) -> tuple[float, float]:
    """(gain, cost) of moving a job from on-demand back to spot now.

    Gain: the on-demand premium saved while the spot run lasts (its expected
    length ``1/λ``, at most the work left) less its restart. Cost: the restart
    paid at the spot price, and in slack that restart plus the one the spot
    run's reclaim will cost (``reclaim_cost_h``), each hour priced at
    ``value_per_h``. The caller moves only when gain > cost."""
    life = 1.0 / hazard_per_h if hazard_per_h > 0 else work_left_h
    gain = premium_per_h * max(0.0, min(work_left_h, life) - restart_h)
    cost = restart_h * spot_price + outlook.value_per_h * (restart_h + outlook.reclaim_cost_h)
    return gain, cost
