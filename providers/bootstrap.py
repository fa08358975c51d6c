"""Render the node bootstrap script (AWS user data, GCP startup script).

One template, ``spotfleet/templates/agent-bootstrap.sh``, used by every cloud
adapter and by the terraform modules, so a worker comes up the same way however
it was bought. ``string.Template`` keeps it dependency-free; every value is
checked to be a single line so nothing can inject extra shell.
"""

from __future__ import annotations

from importlib import resources
from string import Template
from typing import Literal

from spotfleet.errors import InvalidSpec
from spotfleet.providers.base import AgentBootstrap

TEMPLATE = "agent-bootstrap.sh"


def _template_text() -> str:
    return (resources.files("spotfleet") / "templates" / TEMPLATE).read_text()


def _single_line(name: str, value: str) -> str:
    if "\n" in value or "\r" in value or "'" in value:
        raise InvalidSpec(name, "must be a single line without quotes")
    return value


def render_bootstrap(bootstrap: AgentBootstrap, *, metadata_flavor: Literal["aws", "gcp"]) -> str:
    """The shell script a new instance runs at first boot."""
    env_lines = "".join(
        f"Environment={_single_line('extra_env', k)}={_single_line('extra_env', v)}\n"
        for k, v in sorted(bootstrap.extra_env.items())
    )
    return Template(_template_text()).substitute(
        spotfleet_version=_single_line("spotfleet_version", bootstrap.spotfleet_version),
        controller_url=_single_line("controller_url", bootstrap.controller_url),
        agent_token=_single_line("agent_token", bootstrap.agent_token),
        cluster=_single_line("cluster", bootstrap.cluster),
        metadata_flavor=metadata_flavor,
        extra_env_lines=env_lines,
    )
