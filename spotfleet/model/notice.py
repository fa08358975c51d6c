"""How long each cloud warns before it reclaims a spot instance.

Why the policy needs it: a job that saves its checkpoint within the notice
loses only a restart to a reclaim; one that cannot (``checkpoint.duration``
longer than the notice) loses the work since its last periodic checkpoint,
and a deadline job must keep that much slack in reserve
(``policies.market.notice_checkpoint_fits``).

- AWS: two minutes (EC2 Spot instance interruption notice).
- GCP: about 30 seconds (Spot VM preemption notice; ACPI G2 soft-off).

A provider not listed (the local provider, a future cloud) is given the
shortest notice known: assuming a longer one could make a deadline job trust
a checkpoint that does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

SPOT_NOTICE_SECONDS: Mapping[str, float] = MappingProxyType({"aws": 120.0, "gcp": 30.0})


def spot_notice_seconds(provider: str) -> float:
    """Seconds between a reclaim notice and the reclaim on ``provider`` (shortest known if unlisted)."""
    return SPOT_NOTICE_SECONDS.get(provider, min(SPOT_NOTICE_SECONDS.values()))
