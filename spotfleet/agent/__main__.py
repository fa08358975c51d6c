"""``python -m spotfleet.agent``: start the node agent (also ``spotfleet agent``)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from spotfleet.agent.agent import Agent
from spotfleet.agent.config import AgentConfig, load_agent_config
from spotfleet.errors import InvalidSpec


def parse_args(argv: list[str] | None = None) -> AgentConfig:
    p = argparse.ArgumentParser(prog="spotfleet agent", description="spotfleet node agent")
    p.add_argument("--config", type=Path, help="agent YAML (as written by the bootstrap script)")
    p.add_argument("--controller-url")
    p.add_argument("--token")
    p.add_argument("--work-dir", type=Path)
    p.add_argument("--provider-id")
    p.add_argument("--gpus", type=int)
    p.add_argument("--metadata", choices=["aws", "gcp", "none"])
    p.add_argument("--metadata-url")
    p.add_argument("--heartbeat-seconds", type=float)
    args = p.parse_args(argv)
    base = load_agent_config(args.config).model_dump() if args.config else {}
    for key in ("controller_url", "token", "work_dir", "provider_id", "gpus", "metadata", "metadata_url",
                "heartbeat_seconds"):  # fmt: skip
        value = getattr(args, key)
        if value is not None:
            base[key] = value
    return AgentConfig.model_validate(base)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        config = parse_args(argv)
    except InvalidSpec as exc:
        print(f"spotfleet agent: {exc}", file=sys.stderr)
        return 2
    from spotfleet.agent import testing

    agent = Agent(config, nvml=testing.fake_nvml(), mps_control=testing.mps_control())

    def _stop(signum: int, _frame: FrameType | None) -> None:
        agent.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    from spotfleet.agent.watch import start_notice_watcher

    start_notice_watcher(agent)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
