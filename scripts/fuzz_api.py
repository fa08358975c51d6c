"""Fuzz the served API with schemathesis, as each kind of caller (CI runs this).

A controller on a real store (``--db``: SQLite file or PostgreSQL URL) with the
fake provider and two running instances; its API served by uvicorn on a free
port; ``st run`` against the served ``/openapi.json`` once per token — admin,
tenant (read+submit), viewer and an instance's agent — with the ``not_a_server_error``
check. A counting middleware records every response the server gave, so the
figures printed (requests, status histogram) are the server's own. Exits 1 on
any 5xx or if schemathesis failed. Bounded: ``--max-examples`` per operation and
``--time-budget`` seconds per caller.

    python scripts/fuzz_api.py --db sqlite:///tmp/fuzz.db --max-examples 30
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from spotfleet.api import auth
from spotfleet.api.app import create_app
from spotfleet.clock import FakeClock
from spotfleet.controller.controller import Controller
from spotfleet.controller.settings import PlanSettings
from spotfleet.model.spec import parse_spec
from spotfleet.policies.simple import SimplePolicy
from spotfleet.providers.fake import FakeProvider
from spotfleet.store import Store
from spotfleet.wire import RegisterRequest

AGENT = "agent-token-for-the-fuzzer-"


class Counting:
    """ASGI wrapper: a histogram of the status codes the server sent."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.statuses: collections.Counter[int] = collections.Counter()
        self.lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start" and scope.get("path") != "/openapi.json":
                with self.lock:
                    self.statuses[int(message["status"])] += 1
            await send(message)

        await self.app(scope, receive, counting_send)


def world(db: str, data_dir: Path) -> tuple[Controller, dict[str, str]]:
    store = Store(db)
    store.migrate()
    clock = FakeClock()
    provider = FakeProvider(clock=clock)
    controller = Controller(store=store, providers={"fake": provider}, policy=SimplePolicy(), clock=clock,
                            data_dir=data_dir, settings=PlanSettings(), controller_url=lambda: "http://127.0.0.1:8478")  # fmt: skip
    controller.executor.token_factory = lambda instance_id: AGENT + instance_id
    for name, tenant in (("fuzz-a", "alpha"), ("fuzz-b", "beta")):
        controller.submit(parse_spec({"name": name, "tenant": tenant, "command": "true"}))
    controller.step()
    for inst in store.list_instances(live_only=True):
        controller.agents.register(AGENT + inst.id, RegisterRequest(provider_id=inst.provider_id))
    controller.step()
    now = clock.now()
    agent_of = next(i.id for i in store.list_instances(live_only=True))
    tokens = {
        "admin": auth.create_token(store, kind="admin", name="fuzz", now=now)[0],
        "tenant": auth.create_token(store, kind="tenant:alpha", name="fuzz", now=now)[0],
        "viewer": auth.create_token(store, kind="viewer", name="fuzz", now=now)[0],
        "agent": AGENT + agent_of,
    }
    return controller, tokens


def fresh_pg_database(server_url: str) -> str:
    """A new, empty database on the server of ``server_url`` (fuzzing writes rows)."""
    import uuid

    from sqlalchemy import create_engine, text

    from spotfleet.store.store import normalize_url

    name = f"spotfleet_fuzz_{uuid.uuid4().hex[:8]}"
    admin = create_engine(normalize_url(server_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return normalize_url(server_url).rsplit("/", 1)[0] + "/" + name


def drop_pg_database(url: str) -> None:
    from sqlalchemy import create_engine, text

    base, name = url.rsplit("/", 1)
    admin = create_engine(base + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=None, help="store URL (default: a fresh SQLite file)")
    ap.add_argument("--max-examples", type=int, default=25)
    ap.add_argument("--time-budget", type=float, default=20.0, help="seconds per caller")
    ap.add_argument("--callers", default="admin,tenant,viewer,agent")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="spotfleet-fuzz-"))
    db = args.db or f"sqlite:///{tmp / 'fuzz.db'}"
    dropped = None
    if db.startswith("postgres"):
        dropped = db = fresh_pg_database(db)
    controller, tokens = world(db, tmp)
    counting = Counting(create_app(controller, api_token="fuzz-legacy-admin-token-0123456789"))
    server = uvicorn.Server(uvicorn.Config(counting, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/openapi.json"
    failed: list[str] = []
    started = time.monotonic()
    per_caller: dict[str, int] = {}
    for caller in args.callers.split(","):
        before = sum(counting.statuses.values())
        cmd = [str(Path(sys.executable).parent / "st"), "run", url, "-H", f"Authorization: Bearer {tokens[caller]}",
               "--checks", "not_a_server_error", "--max-examples", str(args.max_examples), "--seed", "16",
               "--workers", "1", "--phases", "examples,coverage,fuzzing", "--no-color"]  # fmt: skip
        # One worker: CPython 3.11 before 3.11.8 shares the AST constructor's recursion
        # counter between threads (gh-106905), and hypothesis parses lambdas while it
        # builds strategies, so two workers crashed schemathesis itself ("SystemError:
        # AST constructor recursion depth mismatch") in CI, not the API.
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.time_budget)
            if done.returncode != 0:
                failed.append(caller)
                sys.stdout.write(done.stdout[-4000:])
        except subprocess.TimeoutExpired:
            pass  # the budget ran out: the requests made so far still count
        per_caller[caller] = sum(counting.statuses.values()) - before
    server.should_exit = True
    thread.join(timeout=10)
    statuses = dict(sorted(counting.statuses.items()))
    errors = sum(n for code, n in statuses.items() if code >= 500)
    backend = db.split(":", 1)[0].split("+")[0]
    report = {"backend": backend, "requests": sum(statuses.values()), "per_caller": per_caller,
              "statuses": statuses, "server_errors": errors, "seconds": round(time.monotonic() - started, 1),
              "schemathesis_failed": failed}  # fmt: skip
    print(json.dumps(report))
    controller.store.close()
    if dropped is not None:
        drop_pg_database(dropped)
    return 1 if errors or failed else 0


if __name__ == "__main__":
    sys.exit(main())
