"""Tunables of the reconcile step (a slice of the config the pure planner reads).

The idle TTL is not here: giving back an empty instance is the policy's
decision (``SimplePolicy.idle_ttl``, ``Knobs.idle_ttl_s``), set from
``reconcile.idle_ttl`` by ``service.make_policy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True, slots=True)
class PlanSettings:
    agent_timeout: timedelta = timedelta(minutes=2)  # no heartbeat this long: the instance is lost
    boot_timeout: timedelta = timedelta(minutes=15)  # launched but the agent never registered
    request_timeout: timedelta = timedelta(minutes=10)  # REQUESTED but never accepted by the cloud
    vanish_grace: timedelta = timedelta(seconds=90)  # list_instances is eventually consistent
    capacity_backoff: timedelta = timedelta(minutes=5)  # an offering out of capacity is avoided this long
    interrupted_backoff: timedelta = timedelta(minutes=10)  # a spot pool that just reclaimed is avoided
    drain_grace: timedelta = timedelta(minutes=2)  # preempted/drained jobs get this long to checkpoint
    max_launch_attempts: int = 5
    quota_backoff: timedelta = timedelta(minutes=15)  # offerings a quota covers wait this long (or until a release)
