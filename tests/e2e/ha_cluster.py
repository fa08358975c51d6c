"""Replicated controllers as an operator runs them: N real ``spotfleet up``
processes on one PostgreSQL database and one data dir (the local provider's
instances, logs and checkpoints), agents given every replica's URL.

Used by ``tests/e2e/test_ha.py`` (CI-sized) and ``bench/ha_chaos.py`` (≥ 50
kills). ``invariants()`` reads the database and the local provider's instance
directories and counts what must be zero: duplicate launches, double binds,
lost jobs, leaked instances, attempts beyond the first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.test_local_e2e import free_port


@dataclass
class Kill:
    pid: int
    epoch: int
    at: float
    failover_s: float | None = None
    orphans: int = 0  # its API workers still alive 10 s after it died (must be 0)


@dataclass
class Cluster:
    database: str
    data_dir: Path
    replicas: int = 3
    lease_ttl: float = 5.0
    renew_every: float = 1.0
    api_workers: int = 0  # spotfleet up --api-workers N (0: the API in the step process)
    ports: list[int] = field(default_factory=list)
    procs: dict[int, subprocess.Popen[str]] = field(default_factory=dict)
    kills: list[Kill] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)  # SIGSTOPped replicas: alive, but they answer nothing

    def __post_init__(self) -> None:
        self.ports = [free_port() for _ in range(self.replicas)]
        urls = ",".join(self.url(p) for p in self.ports)
        self.config = self.data_dir / "controller.yaml"
        self.config.write_text(
            f"database: {self.database}\n"
            f"api: {{advertise_url: '{urls}'}}\n"
            f"ha: {{lease_ttl: {self.lease_ttl}s, renew_every: {self.renew_every}s}}\n"
            "reconcile: {interval: 0.5s, idle_ttl: 2s, heartbeat: 0.5s}\n"
            "providers: {local: {heartbeat: 0.5s, max_instances: 12}}\n"
        )

    @staticmethod
    def url(port: int) -> str:
        return f"http://127.0.0.1:{port}"

    # ------------------------------------------------------------ processes

    def start(self, port: int) -> None:
        env = {**os.environ, "SPOTFLEET_DATA_DIR": str(self.data_dir)}
        log = open(self.data_dir / f"up-{port}.log", "a")
        self.procs[port] = subprocess.Popen(
            [sys.executable, "-m", "spotfleet.cli", "up", "--port", str(port), "--config", str(self.config),
             *(["--api-workers", str(self.api_workers)] if self.api_workers else [])],
            env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def start_all(self, timeout: float = 60.0) -> None:
        for port in self.ports:
            self.start(port)
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while self.health(port) is None:
                assert self.procs[port].poll() is None, (self.data_dir / f"up-{port}.log").read_text()
                assert time.monotonic() < deadline, "a replica did not come up"
                time.sleep(0.2)

    def health(self, port: int) -> dict[str, Any] | None:
        try:
            r = httpx.get(f"{self.url(port)}/healthz", timeout=1.0)
            data: dict[str, Any] = r.json()
            return data if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def leader(self) -> tuple[int, dict[str, Any]] | None:
        """The port and /healthz of the replica that says it leads (None if none does)."""
        for port, proc in self.procs.items():
            if proc.poll() is None and port not in self.frozen:
                h = self.health(port)
                if h is not None and h.get("role") == "leader":
                    return port, h
        return None

    def wait_leader(self, *, above_epoch: int = 0, timeout: float = 60.0) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.leader()
            if found is not None and int(found[1]["epoch"]) > above_epoch:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no leader above epoch {above_epoch} within {timeout}s")

    def kill_leader(self, *, restart: bool = True) -> Kill:
        """kill -9 the leader, time the failover, start a fresh replica on its port."""
        port, h = self.wait_leader()
        proc = self.procs[port]
        workers = api_workers_of(proc.pid)
        kill = Kill(pid=proc.pid, epoch=int(h["epoch"]), at=time.monotonic())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        kill.orphans = sum(alive(w) for w in workers)
        if restart:
            self.start(port)
        self.wait_leader(above_epoch=kill.epoch)
        kill.failover_s = time.monotonic() - kill.at
        self.kills.append(kill)
        return kill

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        from spotfleet.providers.local import LocalProvider

        LocalProvider(state_dir=self.data_dir / "local-instances").stop_all()

    # ------------------------------------------------------------ users

    def freeze(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGSTOP)
        self.frozen.add(port)

    def thaw(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGCONT)
        self.frozen.discard(port)

    def any_url(self) -> str:
        live = [p for p, proc in self.procs.items() if proc.poll() is None and p not in self.frozen]
        return self.url(live[0])

    def submit(self, spec: dict[str, Any], *, port: int | None = None) -> str:
        for _ in range(50):  # a replica may be the one just killed
            url = self.url(port) if port is not None else self.any_url()
            try:
                r = httpx.post(f"{url}/v1/jobs", json=spec, timeout=10)
                r.raise_for_status()
                return str(r.json()["id"])
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError("no replica took the submission")

    def jobs(self) -> list[dict[str, Any]]:
        for _ in range(50):
            try:
                r = httpx.get(f"{self.any_url()}/v1/jobs", params={"limit": 10000}, timeout=10)
                r.raise_for_status()
                data: list[dict[str, Any]] = r.json()
                return data
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError("no replica answered")

    # ------------------------------------------------------------ what must be zero

    def invariants(self) -> dict[str, Any]:
        import json

        from sqlalchemy import create_engine, text

        from spotfleet.store.store import normalize_url

        engine = create_engine(normalize_url(self.database))
        with engine.connect() as conn:
            instances = conn.execute(text("SELECT id, request_id, provider_id, state FROM instances")).all()
            attempts = conn.execute(text("SELECT job_id, attempt, node_rank, outcome FROM job_attempts")).all()
            jobs = conn.execute(text("SELECT id, state, attempt FROM jobs")).all()
        engine.dispose()
        dirs = [json.loads((d / "instance.json").read_text()) | {"dir": d}
                for d in (self.data_dir / "local-instances").glob("local-*") if (d / "instance.json").exists()]  # fmt: skip
        per_request = Counter(d["request_id"] for d in dirs)
        known = {row.provider_id for row in instances if row.provider_id}
        alive = [d for d in dirs if not ((d["dir"] / "terminated").exists() or (d["dir"] / "reclaimed").exists())]
        binds = Counter((a.job_id, a.attempt, a.node_rank) for a in attempts)
        return {
            "jobs": len(jobs),
            "instances": len(dirs),
            "duplicate_launches": sum(n - 1 for n in per_request.values()),
            "unknown_instances": len([d for d in dirs if d["provider_id"] not in known]),
            "leaked_instances": len(alive),
            "double_binds": sum(n - 1 for n in binds.values()),
            "lost_jobs": len([j for j in jobs if j.state != "succeeded"]),
            "repeated_attempts": len([j for j in jobs if j.attempt != 1]),
        }


def api_workers_of(pid: int) -> list[int]:
    """The live API worker processes (``--api-workers``) of a ``spotfleet up``."""
    import psutil

    found = []
    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return []
    for child in children:
        try:
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child.pid)
        except psutil.Error:  # exited (or a zombie) between the listing and the look
            pass
    return found


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def chaos_job(name: str, steps: int) -> dict[str, Any]:
    return {"name": name, "priority": "opportunistic",
            "command": ["python", "-m", "spotfleet.demo_job", "--steps", str(steps), "--step-seconds", "0.1",
                        "--checkpoint-every", "10"]}  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]
