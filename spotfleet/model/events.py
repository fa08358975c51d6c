"""Events the clouds (and node agents) report about instances.

One type for every source: AWS IMDS and EventBridge, GCP metadata and zone
operations, the local provider's emulated metadata. The controller drains on
``InstanceEvent`` regardless of where it came from, and de-duplicates by
(instance, kind): a notice seen by both the agent and the cloud's event bus is
handled once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class NoticeKind(enum.StrEnum):
    SPOT_INTERRUPTION = "spot_interruption"  # AWS 2-minute warning, GCP preemption (~30 s)
    REBALANCE = "rebalance"  # AWS rebalance recommendation: elevated risk, soft signal
    MAINTENANCE = "maintenance"  # scheduled host maintenance / AWS Health scheduled change
    TERMINATED = "terminated"  # the instance is gone (state change, preempted and deleted)

    @property
    def hard(self) -> bool:
        """Will the instance be taken away (as opposed to a soft warning)?"""
        return self in (NoticeKind.SPOT_INTERRUPTION, NoticeKind.TERMINATED)


@dataclass(frozen=True, slots=True)
class InstanceEvent:
    """Something happened (or will happen) to one instance."""

    provider: str
    provider_instance_id: str
    kind: NoticeKind
    observed_at: datetime
    deadline: datetime | None = None  # when the cloud takes it back, if announced
    source: str = ""  # imds, gce-metadata, eventbridge, gce-operation, agent, local
    detail: str = ""

    @property
    def dedupe_key(self) -> tuple[str, str, str]:
        return (self.provider, self.provider_instance_id, self.kind.value)
