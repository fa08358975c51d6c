"""Fleet-scale load on one controller (``spotfleet up`` on PostgreSQL, a real
process): a backlog of pending jobs and simulated node agents heartbeating
over HTTP on loopback, bounded in time.

    python bench/fleet_load.py [--jobs 10000] [--agents 2000] [--seconds 30] [--pg ADMIN_URL]

Phases: ``--single`` submissions one request each (submissions/s), the rest of
the backlog through ``POST /v1/jobs/batch`` (submissions/s, batched), then
``--agents`` agents (instances written straight into the store, each with its
token) register and heartbeat every ``--every`` seconds for ``--seconds``;
then ``GET /v1/jobs?limit=1000``. The jobs ask for a GPU no provider sells, so
the backlog stays pending and every step plans over all of it.

Reports p50/p99 heartbeat latency, achieved heartbeats/s, reconcile step
duration (the controller's own histogram, ``/metrics``), database transactions
per heartbeat (``pg_stat_database.xact_commit``, every transaction of the
controller during the phase, steps included, divided by heartbeats), listing
latency, controller RSS and CPU — a table, then one JSON line. One load
generator process (asyncio) drives the agents: on a small machine it, not the
controller, may be the limit — the achieved rate is printed next to the target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))] if s else float("nan")


def step_histogram(url: str) -> tuple[float, float]:
    text_ = httpx.get(f"{url}/metrics", timeout=60).text
    total = count = 0.0
    for line in text_.splitlines():
        if line.startswith("spotfleet_reconcile_step_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("spotfleet_reconcile_step_seconds_count"):
            count = float(line.split()[-1])
    return total, count


def tree_cpu(proc: psutil.Process) -> float:
    """CPU seconds of the controller and its API workers (user + system)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def postgres_cpu() -> dict[int, float]:
    """CPU seconds of each PostgreSQL process on this machine (the server is local), by pid."""
    out = {}
    for p in psutil.process_iter(["name"]):
        if p.info["name"] in ("postgres", "postmaster"):
            try:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
            except psutil.Error:
                pass
    return out


def cpu_since(before: dict[int, float], after: dict[int, float]) -> float:
    """What the processes alive at the end used since ``before`` (a backend that
    exited in between is not counted: a floor, not an exact figure)."""
    return sum(max(0.0, used - before.get(pid, 0.0)) for pid, used in after.items())


def xact_commit(engine: Any, name: str) -> int:
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        return int(conn.execute(text("SELECT xact_commit FROM pg_stat_database WHERE datname = :n"),
                                {"n": name}).scalar_one())  # fmt: skip


def make_agents(db_url: str, n: int) -> list[str]:
    """N RUNNING instances of an unconfigured provider, each with its agent token."""
    from spotfleet.model.instance import Instance, InstanceState
    from spotfleet.providers.fake import gpu_offering
    from spotfleet.store import Store
    from spotfleet.store.store import Changes

    store = Store(db_url)
    now = datetime.now(UTC)
    o = gpu_offering(gpus=1)
    tokens, batch = [], []
    for i in range(n):
        token = f"sf_bench_{uuid.uuid4().hex}"
        inst = Instance(id=f"sf-load-{i:05d}", offering=o, request_id=f"load-{i}", state=InstanceState.RUNNING,
                        created_at=now, state_since=now, provider_id=f"fake-{i}", launched_at=now)  # fmt: skip
        batch.append((inst, token))
        tokens.append(token)
    for k in range(0, n, 500):
        store.commit(Changes(new_instances=batch[k : k + 500]), now=now)
    store.close()
    return tokens


class Connections:
    """Keep-alive HTTP/1.1 connections to the controller, shared by the simulated
    agents: a few lines of asyncio streams instead of httpx, whose per-request cost
    (tens of ms of CPU with thousands of waiting tasks) made the load generator, not
    the controller, the limit on a 2-core machine."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port, self.size = host, port, size
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.opened = 0

    async def post(self, path: str, body: bytes, token: str, *, timeout: float = 30) -> int:
        if self.idle.empty() and self.opened < self.size:
            self.opened += 1
            conn = await asyncio.open_connection(self.host, self.port)
        else:
            conn = await self.idle.get()
        reader, writer = conn
        try:
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))  # fmt: skip
            await reader.readexactly(length)
        except BaseException:
            writer.close()
            self.opened -= 1
            raise
        self.idle.put_nowait(conn)
        return int(head.split(b" ", 2)[1])


async def agents_phase(url: str, tokens: list[str], *, every: float, seconds: float) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    host, port = url.removeprefix("http://").split(":")
    conns = Connections(host, int(port), size=256)
    end = time.monotonic() + seconds
    beat = json.dumps({"jobs": [], "notices": [], "telemetry": {}, "events": []}).encode()

    async def agent(i: int, token: str) -> None:
        nonlocal errors
        await asyncio.sleep(every * i / len(tokens))  # spread the fleet over one period
        for _ in range(5):
            try:
                if await conns.post("/v1/agent/register", json.dumps({"provider_id": f"fake-{i}", "gpus": 1}).encode(),
                                    token) == 200:  # fmt: skip
                    break
            except (TimeoutError, OSError, asyncio.IncompleteReadError):
                errors += 1
        nxt = time.monotonic()
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                if await conns.post("/v1/agent/heartbeat", beat, token) != 200:
                    errors += 1
                else:
                    latencies.append(time.monotonic() - t0)
            except (TimeoutError, OSError, asyncio.IncompleteReadError):
                errors += 1
            nxt += every
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))

    await asyncio.gather(*(agent(i, t) for i, t in enumerate(tokens)))
    return latencies, errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=10000, help="backlog of pending jobs")
    p.add_argument("--single", type=int, default=500, help="of which submitted one request each")
    p.add_argument("--batch", type=int, default=500, help="jobs per batch request")
    p.add_argument("--agents", type=int, default=2000)
    p.add_argument("--every", type=float, default=2.0, help="heartbeat period, seconds")
    p.add_argument("--seconds", type=float, default=30.0, help="length of the heartbeat phase")
    p.add_argument(
        "--api-workers", type=int, default=0, help="spotfleet up --api-workers N (0: API in the step process)"
    )
    p.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres", help="admin URL")
    args = p.parse_args(argv)

    name = f"spotfleet_load_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    db_url = f"{args.pg.rsplit('/', 1)[0]}/{name}"
    out: dict[str, Any] = {"jobs": args.jobs, "agents": args.agents, "every_s": args.every, "seconds": args.seconds,
                           "api_workers": args.api_workers,
                           "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 1)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="fleet-load-") as tmp:
        from tests.e2e.test_local_e2e import free_port

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cfg = Path(tmp) / "c.yaml"
        cfg.write_text(f"database: {db_url}\nreconcile: {{interval: 5s, idle_ttl: 10h, agent_timeout: 10m}}\n")
        proc = subprocess.Popen([sys.executable, "-m", "spotfleet.cli", "up", "--port", str(port), "--config",
                                 str(cfg), "--api-workers", str(args.api_workers)], env={**os.environ, "SPOTFLEET_DATA_DIR": tmp},
                                stdout=open(Path(tmp) / "up.log", "w"), stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, (Path(tmp) / "up.log").read_text()
                time.sleep(0.2)
            ctl = psutil.Process(proc.pid)
            spec = {"name": "backlog", "command": "true", "priority": "opportunistic",
                    "resources": {"gpu_types": ["B300"]}}  # fmt: skip
            with httpx.Client(base_url=url, timeout=60) as c:
                t0 = time.monotonic()
                for _ in range(args.single):
                    c.post("/v1/jobs", json=spec).raise_for_status()
                out["submit_single_per_s"] = round(args.single / (time.monotonic() - t0), 1)
                rest = args.jobs - args.single
                t0 = time.monotonic()
                for k in range(0, rest, args.batch):
                    c.post("/v1/jobs/batch", json={"jobs": [spec] * min(args.batch, rest - k)}).raise_for_status()
                out["submit_batched_per_s"] = round(rest / (time.monotonic() - t0), 1) if rest > 0 else None
            tokens = make_agents(db_url, args.agents)
            time.sleep(args.every)  # let the step settle on the full backlog
            s0, n0 = step_histogram(url)
            x0 = xact_commit(admin, name)
            me = psutil.Process()
            cpu0, pg0, gen0, w0 = tree_cpu(ctl), postgres_cpu(), sum(me.cpu_times()[:2]), time.monotonic()
            latencies, errors = asyncio.run(agents_phase(url, tokens, every=args.every, seconds=args.seconds))
            cpu1, pg1, gen1, w1 = tree_cpu(ctl), postgres_cpu(), sum(me.cpu_times()[:2]), time.monotonic()
            x1 = xact_commit(admin, name)
            s1, n1 = step_histogram(url)
            beats = len(latencies)
            out.update({
                "heartbeats": beats, "heartbeat_errors": errors,
                "heartbeats_per_s": round(beats / (w1 - w0), 1),
                "target_heartbeats_per_s": round(args.agents / args.every, 1),
                "heartbeat_p50_ms": round(pct(latencies, 50) * 1000, 1),
                "heartbeat_p99_ms": round(pct(latencies, 99) * 1000, 1),
                "steps": int(n1 - n0), "step_mean_s": round((s1 - s0) / (n1 - n0), 3) if n1 > n0 else None,
                "transactions_per_heartbeat": round((x1 - x0) / beats, 2) if beats else None,
                "controller_cpu_cores": round((cpu1 - cpu0) / (w1 - w0), 2),
                "postgres_cpu_cores": round(cpu_since(pg0, pg1) / (w1 - w0), 2),
                "load_generator_cpu_cores": round((gen1 - gen0) / (w1 - w0), 2),
                # CPU per heartbeat, steps and lease included: what 1,000 heartbeats/s would need, in cores
                "controller_cpu_ms_per_heartbeat": round((cpu1 - cpu0) / beats * 1000, 2) if beats else None,
                "postgres_cpu_ms_per_heartbeat": round(cpu_since(pg0, pg1) / beats * 1000, 2) if beats else None,
                "postgres_processes_measured": len(pg1),  # 0: the server's CPU was not seen, the figure is void
            })  # fmt: skip
            with httpx.Client(base_url=url, timeout=60) as c:
                times = []
                for _ in range(10):
                    t0 = time.monotonic()
                    c.get("/v1/jobs", params={"limit": 1000}).raise_for_status()
                    times.append(time.monotonic() - t0)
            out["list_1000_ms_median"] = round(statistics.median(times) * 1000, 1)
            out["controller_rss_mb"] = round(ctl.memory_info().rss / 2**20, 1)  # the step process
            workers = [c for c in ctl.children() if c.cmdline() and "spawn_main" in " ".join(c.cmdline())]
            if workers:
                out["api_worker_rss_mb_max"] = round(max(w.memory_info().rss for w in workers) / 2**20, 1)
                out["all_processes_rss_mb"] = round(sum(p.memory_info().rss for p in [ctl, *workers]) / 2**20, 1)
        finally:
            proc.send_signal(2)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
    width = max(len(k) for k in out)
    for key, value in out.items():
        print(f"{key:{width}s}  {value}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
