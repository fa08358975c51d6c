"""Wires the metadata notice watcher (AWS IMDSv2 / GCP metadata) to the agent.

The watchers live in ``spotfleet.agent.notices``; this starts the one the
agent's config names in a daemon thread, handing each notice to
``Agent.notice`` (jobs hear it at once; the controller at the next heartbeat,
sent immediately).
"""

from __future__ import annotations

import logging
import threading

from spotfleet.agent.agent import Agent
from spotfleet.agent.notices import DEFAULT_BASE_URLS, start_watching, watcher_for

log = logging.getLogger(__name__)


def start_notice_watcher(agent: Agent, *, provider: str | None = None) -> threading.Thread | None:
    cfg = agent.config
    if cfg.metadata == "none":
        return None
    base = cfg.metadata_url or DEFAULT_BASE_URLS[cfg.metadata]
    watcher = watcher_for(cfg.metadata, base, provider=provider, instance_id=cfg.provider_id, clock=agent.clock)
    log.info("watching %s metadata at %s for interruption notices", cfg.metadata, base)
    return start_watching(watcher, agent.notice)
