"""Agents take several controller URLs and move to the next replica when the one
they talk to is down (connection refused) or failing (5xx). Real HTTP servers on
loopback stand in for the replicas."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from spotfleet.agent.agent import Agent, controller_urls
from spotfleet.agent.config import AgentConfig
from spotfleet.clock import FakeClock
from tests.e2e.test_local_e2e import free_port


class Replica:
    def __init__(self, status: int) -> None:
        self.status = status
        self.paths: list[str] = []
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                replica.paths.append(self.path)
                body = json.dumps({"instance_id": "sf-1", "heartbeat_seconds": 2.0}).encode()
                self.send_response(replica.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    made = [Replica(503), Replica(200), Replica(200)]
    yield made
    for r in made:
        r.stop()


def test_controller_urls_are_comma_separated() -> None:
    assert controller_urls(" http://a:1/, http://b:2 ,") == ["http://a:1", "http://b:2"]


def test_the_agent_skips_dead_and_failing_replicas_and_follows_the_next(
    replicas: list[Replica], tmp_path: Path
) -> None:
    failing, good, spare = replicas
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = AgentConfig(controller_url=f"{dead},{failing.url},{good.url},{spare.url}", token="agent-token-1",
                         work_dir=tmp_path, gpus=0)  # fmt: skip
    agent = Agent(config, clock=FakeClock(), gpu_count=0)
    answer = agent.register()
    assert answer.instance_id == "sf-1"
    assert agent.controller_url == good.url
    assert failing.paths == ["/v1/agent/register"] and spare.paths == []
    agent.beat()
    assert good.paths == ["/v1/agent/register", "/v1/agent/heartbeat"]  # it stays while the replica answers
    good.stop()  # that replica dies: the next heartbeat goes to the next one
    agent.beat()
    assert agent.controller_url == spare.url and spare.paths == ["/v1/agent/heartbeat"]
