"""How each provider bills an instance's paid time.

AWS (Linux) and GCP both bill per second with a one-minute minimum per
instance launch. Rules are per provider and configurable: a rule is an
increment (paid time is rounded *up* to it) and a minimum (charged when an
instance ran less). The minimum is charged once per instance, when it is over
(a live instance shows what it has accrued so far), and that topped-up time is
idle: no job used it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from spotfleet.errors import InvalidSpec


@dataclass(frozen=True, slots=True)
class BillingRule:
    increment_seconds: int = 1
    minimum_seconds: int = 60

    def billed_seconds(self, used: Fraction, *, closed: bool) -> Fraction:
        """Seconds the provider charges for ``used`` seconds of one instance."""
        if used <= 0:
            return Fraction(self.minimum_seconds) if closed and self.minimum_seconds else Fraction(0)
        inc = max(1, self.increment_seconds)
        rounded = Fraction(math.ceil(used / inc) * inc)
        return max(rounded, Fraction(self.minimum_seconds)) if closed else rounded

    def __str__(self) -> str:
        return f"per {self.increment_seconds}s, minimum {self.minimum_seconds}s"


DEFAULT_RULE = BillingRule()
DEFAULT_RULES: Mapping[str, BillingRule] = {
    "aws": BillingRule(increment_seconds=1, minimum_seconds=60),
    "gcp": BillingRule(increment_seconds=1, minimum_seconds=60),
}


def rule_for(provider: str, rules: Mapping[str, BillingRule] | None = None) -> BillingRule:
    table = DEFAULT_RULES if rules is None else rules
    return table.get(provider, DEFAULT_RULES.get(provider, DEFAULT_RULE))


def parse_rule(text: str) -> tuple[str, BillingRule]:
    """``aws=60`` (minimum seconds) or ``gcp=60/1`` (minimum/increment), for the CLI."""
    name, sep, value = text.partition("=")
    minimum, _, increment = value.partition("/")
    try:
        if not sep or not name.strip():
            raise ValueError(text)
        rule = BillingRule(increment_seconds=int(increment or 1), minimum_seconds=int(minimum))
        if rule.increment_seconds < 1 or rule.minimum_seconds < 0:
            raise ValueError(text)
    except ValueError:
        raise InvalidSpec("billing", f"expected PROVIDER=MIN_SECONDS[/INCREMENT_SECONDS], got {text!r}") from None
    return name.strip(), rule
