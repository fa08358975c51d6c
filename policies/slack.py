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

- idle without spot: on-demand now when an outage is expected to outlast a
  round trip (``m > 2d``) and the slack is more likely than not to run out
  waiting (``p ≥ ½``) — the hours are needed on-demand anyway, and taken now
  they keep spot usable later instead of forcing a final on-demand stretch;
- a move between pools or markets costs its restart in slack, ``d × v``;
- a reclaim costs the slack the rule will spend on it (``reclaim_slack``):
  the spot-only ``d + q·m`` while the job would wait, but ``d + q·2d`` once
  the rule above covers outages on on-demand.

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
    wait_h: float | None = None,
) -> SlackOutlook:
    """The slack outlook of a job with ``work_left_h`` to do on spot (see the module docstring).

    ``premium_per_h``: on-demand minus spot price for the job's nodes (USD/h).
    ``wait_h``: the mean wait of the current outage when the job is idle
    (``idle_without_spot``); None: the market's mean down run."""
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
        w = m if wait_h is None else max(0.0, wait_h)
        mean += d + w  # wait out this outage, then restart
        var += w * w
    sd = math.sqrt(var)
    if sd > 1e-9:
        pressure = 0.5 * math.erfc((spendable_h - mean) / (sd * math.sqrt(2.0)))
    else:
        pressure = 1.0 if mean > spendable_h else 0.0
    if spendable_h <= 0:
        pressure = 1.0
    priced = reclaim_slack(pressure=pressure, restart_h=d, unavailable=q, outage_h=m)
    k = spot_hours_per_slack_hour(lam, d, priced, work_left_h)
    return SlackOutlook(spendable_h, mean, sd, pressure, pressure * max(0.0, premium_per_h) * k, cost1, m, priced)


def covers_outages(pressure: float, outage_h: float, restart_h: float) -> bool:
    """Does the deadline rule take on-demand through a market outage instead of
    waiting it out? When the slack is more likely than not to run out
    (``p ≥ ½``) and outages are expected to outlast a round trip through
    on-demand (``m > 2d``). The one place this rule lives: an idle job's market
    (``market.deadline_market``) and the price of a reclaim (``reclaim_slack``)."""
    return pressure >= 0.5 and outage_h > 2 * restart_h


def reclaim_slack(*, pressure: float, restart_h: float, unavailable: float, outage_h: float) -> float:
    """Slack one reclaim costs a job under the deadline rule, not on a spot-only path.

    A reclaim costs its restart ``d`` and, when no zone has spot (``q``), what
    the outage costs: the wait ``m``, or, when the rule covers outages on
    on-demand (``covers_outages``), the round trip ``2d`` — the on-demand hours
    then do work that, with the slack binding, would otherwise run on
    on-demand at the end, so they cost no premium."""
    outage = 2 * restart_h if covers_outages(pressure, outage_h, restart_h) else outage_h
    return restart_h + unavailable * outage


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


def cheaper_pool_wait(
    *, slack_value_per_h: float, wait_h: float, restart_h: float, gap_per_h: float, up_price_per_h: float
) -> tuple[float, float]:
    """(cost of waiting, cost of not waiting) for an idle deadline job that could
    take a spot pool up now at ``up_price_per_h`` or wait for cheaper pools that
    are down, ``gap_per_h`` cheaper and expected back in ``wait_h``.

    Over the wait both paths end on the cheap pool with one restart there.
    Waiting spends ``wait_h`` of slack; taking the dear pool spends its own
    restart ``d`` of slack instead, so waiting costs ``(wait_h − d)`` hours of
    slack at ``slack_value_per_h``. Taking the dear pool pays its restart at
    its price and does the ``wait_h − d`` hours of work it buys at ``gap_per_h``
    more than the cheap pool will charge for them. A wait shorter than a
    restart costs nothing: the dear pool would not even have started.

    So the job waits while an hour of slack is worth less than the gap
    (plus the restart spread over the useful wait): with plenty of slack it
    waits the outage out; as the slack comes to bind, the dear pool is taken.
    """
    useful = max(0.0, wait_h - restart_h)
    return slack_value_per_h * useful, gap_per_h * useful + restart_h * up_price_per_h


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
    ``value_per_h``. The caller moves only when gain > cost.

    Design choice: the two sides do not count an attempt alike. The gain
    takes the restart off the run (``1/λ − d``, not ``e^{−λd}/λ``) and the
    cost charges the restart's dollars in full, though with the slack binding
    the later attempt it displaces would pay its own. At ``p`` = 1 and
    ``λ_now`` = ``λ`` the test therefore fails by ``d·s + Δ·λd²/2``, so a job
    returns only when the current run is visibly better than the average
    one. Made exact, the test returned on near ties in flapping markets and
    spent the slack before the long runs came (V100 1.157 → 1.197;
    docs/simulator.md, "The return test's bookkeeping made exact")."""
    life = 1.0 / hazard_per_h if hazard_per_h > 0 else work_left_h
    gain = premium_per_h * max(0.0, min(work_left_h, life) - restart_h)
    cost = restart_h * spot_price + outlook.value_per_h * (restart_h + outlook.reclaim_slack_h)
    return gain, cost
