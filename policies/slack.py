"""The price of a deadline job's slack: how likely it runs out, and what an hour of it is worth.

A deadline job on spot spends *slack* (time left minus work left) on every
restart and every wait for capacity; when the slack is gone, the rest of the
work runs on on-demand. So an hour of slack spent now is worth, in
expectation, the on-demand premium of the spot hours it would have bought:

    value per hour of slack  v = P(slack runs out) × (on-demand − spot price) × k

with ``k`` the hours of spot an hour of slack buys once it is short
(``spot_hours_per_slack_hour``, at least 1, below).

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

- idle without spot, with the slack more likely than not to run out
  (``p ≥ ½``): wait the outage out or cover it on on-demand, whichever the
  learned outages say costs less slack (``outage_plan``: ski rental with the
  outage lengths seen — wait while the outages that lasted this long mostly
  end soon, cover once waiting on is expected to cost more than a round trip
  through on-demand, ``2d``) — the on-demand hours are needed anyway, and
  taken now they keep spot usable later instead of forcing a final
  on-demand stretch;
- a move between pools or markets costs its restart in slack, ``d × v``;
- a reclaim costs the slack the rule will spend on it (``reclaim_slack``):
  the spot-only ``d + q·m`` while the job would wait, but ``d + q·c`` once
  the rule above covers outages, ``c`` the slack an outage then costs from its
  start (at most ``2d`` and at most ``m``).

What an hour of slack is worth once it binds: not one hour of on-demand at
the end, but the spot attempts it would have paid for. Each attempt (a
return or a start on spot) spends ``d`` plus what its reclaim costs
(``reclaim_slack``), and buys the usable part of a spot run, ``e^{−λd}/λ`` (at most
the work left). So an hour of slack is worth ``k = max(1, usable run /
slack per attempt)`` hours of the premium: a move that spends slack on a pool
no better than the market's average run then does not pay, since the same
slack buys an average run later. With spot runs shorter than an attempt's
cost, ``k`` is 1 (an hour of slack is an hour of on-demand at the end).

Design choice: a normal approximation of a compound Poisson is crude in the
tails, but the decision it drives only compares ``p`` to ½ and prices
restarts, where the mean and spread are what matter.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from spotfleet.policies.forecast import SpotSupply


@dataclass(frozen=True, slots=True)
class SlackOutlook:
    """What the remaining slack of a deadline job is expected to face."""

    spendable_h: float  # slack the job may spend before on-demand must finish it
    need_mean_h: float  # expected slack a spot-only path still spends
    need_sd_h: float
    pressure: float  # P(need > spendable)
    value_per_h: float  # USD per hour of slack: pressure × (on-demand − spot) for the job's nodes × attempts it buys
    reclaim_cost_h: float  # expected slack one reclaim costs a spot-only path (restart + wait for spot)
    outage_h: float  # mean wait for spot once the market has none (its mean down run)
    reclaim_slack_h: float  # what one reclaim costs under the policy: long outages covered on on-demand
    cover_outage_now: bool = False  # idle without spot: on-demand now beats waiting on (p ≥ ½, ``outage_plan``)

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
    binding = covers_outages(pressure)
    from_start, _ = outage_plan(supply.down_runs_h, m, age_h=0.0, round_trip_h=2.0 * d)
    cover_now = False
    if binding and idle_without_spot:
        _, wait = outage_plan(supply.down_runs_h, m, age_h=supply.down_for_h, round_trip_h=2.0 * d)
        cover_now = not wait
    priced = reclaim_slack(restart_h=d, unavailable=q, outage_cost_h=from_start if binding else m)
    k = spot_hours_per_slack_hour(lam, d, priced, work_left_h)
    return SlackOutlook(spendable_h, mean, sd, pressure, pressure * max(0.0, premium_per_h) * k, cost1, m, priced,
                        cover_now)  # fmt: skip


def covers_outages(pressure: float) -> bool:
    """Does the deadline rule weigh covering a market outage on on-demand
    against waiting it out? Only when the slack is more likely than not to run
    out (``p ≥ ½``): the on-demand hours then do work that would otherwise run
    on on-demand at the end, so they cost no premium; with slack to spare they
    would, and the job waits for spot. The one place this rule lives: an idle
    job's market (``market.deadline_market``, through ``SlackOutlook``) and the
    price of a reclaim (``reclaim_slack``)."""
    return pressure >= 0.5


@functools.lru_cache(maxsize=1024)
def outage_plan(runs_h: tuple[float, ...], mean_h: float, *, age_h: float, round_trip_h: float) -> tuple[float, bool]:
    """Ski rental with the learned outage lengths: (expected slack the current
    outage still costs under the best plan, whether that plan waits now).

    An outage that has lasted ``age_h`` is either waited out or covered on
    on-demand, which costs a round trip ``R`` (``2d``: a restart there and one
    back). The best plan waits until the outage has lasted ``τ``, then covers
    it; it costs ``E[min(D, τ) − a | D > a] + P(D > τ | D > a)·R``. ``τ = a``
    (cover now) costs ``R``; ``τ = ∞`` (always wait) the mean residual outage.
    The outages ``D`` are those seen (``runs_h``) plus one exponential
    pseudo-outage of the learned mean ``mean_h`` (memoryless: its rest is
    ``mean_h`` at any age). With no outage seen this is the exponential model:
    cover now exactly when ``mean_h > R``. Bursty outages — many one-step gaps,
    a few long ones — have a long mean but end soon when young: waiting the
    first steps out beats covering them at once, and covering beats waiting
    once an outage has outlasted the gaps. The best ``τ`` of an empirical
    distribution lies at a seen length or at infinity, so those are the
    candidates; sorted with running sums, ``O(n log n)``, and cached: every
    job of a plan reads the same market."""
    excess = sorted(r - age_h for r in runs_h if r > age_h)
    m = max(mean_h, 1e-9)
    weight = len(excess) + 1.0  # the seen outages that lasted this long, and the pseudo-outage
    best = round_trip_h  # cover now
    waited = 0.0  # running sum of the excesses up to the candidate
    total = sum(excess)
    for j, e in enumerate(excess):
        waited += e
        if j + 1 < len(excess) and excess[j + 1] == e:
            continue  # ties: evaluate once, after the last of them
        survive = len(excess) - (j + 1)
        tail = math.exp(-e / m)
        cost = (waited + survive * e + m * (1.0 - tail) + (survive + tail) * round_trip_h) / weight
        best = min(best, cost)
    best = min(best, (total + m) / weight)  # wait it out whatever its length
    return best, best < round_trip_h


def reclaim_slack(*, restart_h: float, unavailable: float, outage_cost_h: float) -> float:
    """Slack one reclaim costs a job under the deadline rule: its restart ``d``
    and, when no zone has spot (``unavailable``, ``q``), what the outage costs —
    the wait ``m`` on a spot-only path, or, once the rule weighs covering it
    (``covers_outages``), the cost of its best plan from the outage's start
    (``outage_plan``, at most the round trip ``2d``)."""
    return restart_h + unavailable * outage_cost_h


def spot_hours_per_slack_hour(
    hazard_per_h: float, restart_h: float, reclaim_cost_h: float, work_left_h: float
) -> float:
    """Hours of spot one hour of slack buys once the slack binds (at least 1; module
    docstring): the usable run ``e^{−λd}/λ`` (at most the work left) over the slack
    one attempt spends, its restart plus its reclaim's cost.

    The usable run is ``market.useful_fraction(λ, d) / λ``; it is written out here
    because ``market`` imports this module."""
    work = max(0.0, work_left_h)
    usable = min(work, math.exp(-hazard_per_h * restart_h) / hazard_per_h) if hazard_per_h > 0 else work
    per_attempt = restart_h + reclaim_cost_h
    return max(1.0, usable / per_attempt) if per_attempt > 0 else 1.0


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
    run's reclaim will cost (``reclaim_slack_h``), each hour priced at
    ``value_per_h``. The caller moves only when gain > cost."""
    life = 1.0 / hazard_per_h if hazard_per_h > 0 else work_left_h
    gain = premium_per_h * max(0.0, min(work_left_h, life) - restart_h)
    cost = restart_h * spot_price + outlook.value_per_h * (restart_h + outlook.reclaim_slack_h)
    return gain, cost
