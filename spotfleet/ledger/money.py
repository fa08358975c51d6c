"""Money as integer micro-dollars, and exact splitting of an amount.

Design choice: every amount in the ledger is an ``int`` of micro-dollars
(1e-6 USD). Prices arrive as floats from the store; they are read through
``Decimal(str(price))`` so a catalog price like 0.918 stays 0.918, and the cost
of one segment is rounded once (half-up) to a micro-dollar. Splitting that
amount among jobs and idle uses the largest-remainder method, so the parts sum
to the whole exactly: job costs + idle cost == instance cost, always.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import TypeVar

MICROS_PER_DOLLAR = 1_000_000
K = TypeVar("K", bound=Hashable)


def price(value: float | str | Decimal) -> Decimal:
    """A price per hour as an exact Decimal (floats via their shortest repr)."""
    return value if isinstance(value, Decimal) else Decimal(str(value))


def cost_micros(price_per_hour: Decimal, seconds: Fraction) -> int:
    """Cost of ``seconds`` at ``price_per_hour``, rounded half-up to a micro-dollar."""
    exact = Fraction(price_per_hour) * seconds * MICROS_PER_DOLLAR / 3600
    return round_half_up(exact)


def round_half_up(value: Fraction) -> int:
    """Nearest integer, halves away from zero for positives (amounts are never negative)."""
    floor = value.numerator // value.denominator
    rest = value - floor
    return floor + 1 if rest >= Fraction(1, 2) else floor


def allocate(total: int, weights: Mapping[K, Fraction]) -> dict[K, int]:
    """Split ``total`` in proportion to ``weights``; the parts sum to ``total``.

    Largest remainder: everyone gets the floor of their exact share, and the
    leftover micro-dollars go to the largest fractional parts (ties broken by
    the order of ``weights``, so the result is deterministic).
    """
    keys = list(weights)
    whole = sum(weights.values(), Fraction(0))
    if not keys:
        return {}
    if whole <= 0:
        out = dict.fromkeys(keys, 0)
        out[keys[0]] = total
        return out
    exact = {k: Fraction(total) * weights[k] / whole for k in keys}
    out = {k: v.numerator // v.denominator for k, v in exact.items()}
    left = total - sum(out.values())
    order = sorted(range(len(keys)), key=lambda i: (-(exact[keys[i]] - out[keys[i]]), i))
    for i in order[:left]:
        out[keys[i]] += 1
    return out


def dollars(micros: int) -> Decimal:
    """Micro-dollars as an exact Decimal number of dollars."""
    return Decimal(micros) / MICROS_PER_DOLLAR


def fmt(micros: int, *, places: int = 2) -> str:
    """``$1,234.57``-style text, rounded half-up (for tables, not for sums)."""
    q = Decimal(1).scaleb(-places)
    value = dollars(micros).quantize(q, rounding=ROUND_HALF_UP)
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):,.{places}f}"
