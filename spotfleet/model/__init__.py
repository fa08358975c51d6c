"""The domain model: specs, jobs, instances, offerings and their state machines.

Depends on nothing else in spotfleet but ``errors``; policies, the controller and
every provider import from here.
"""

from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.instance import (
    INSTANCE_TRANSITIONS,
    LIVE_INSTANCE_STATES,
    TERMINAL_INSTANCE_STATES,
    Instance,
    InstanceState,
)
from spotfleet.model.job import (
    ACTIVE_JOB_STATES,
    JOB_TRANSITIONS,
    TERMINAL_JOB_STATES,
    Binding,
    Checkpoint,
    Job,
    JobState,
)
from spotfleet.model.offering import Market, NodeRequirements, Offering, Offerings
from spotfleet.model.spec import JobSpec, Priority, Resources, load_specs, parse_spec
from spotfleet.model.statemachine import TransitionRecord

__all__ = [
    "ACTIVE_JOB_STATES",
    "INSTANCE_TRANSITIONS",
    "JOB_TRANSITIONS",
    "LIVE_INSTANCE_STATES",
    "TERMINAL_INSTANCE_STATES",
    "TERMINAL_JOB_STATES",
    "Binding",
    "Checkpoint",
    "Instance",
    "InstanceEvent",
    "InstanceState",
    "Job",
    "JobSpec",
    "JobState",
    "Market",
    "NodeRequirements",
    "NoticeKind",
    "Offering",
    "Offerings",
    "Priority",
    "Resources",
    "TransitionRecord",
    "load_specs",
    "parse_spec",
]
