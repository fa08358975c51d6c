"""Assembles a running controller from a ``Config``: store, providers, policy,
controller, the HTTP API (uvicorn) and the scheduler (APScheduler).

APScheduler only *triggers* reconcile steps — on an interval, and at once when
something happens (a submission, an agent report). The step itself is
``Controller.step()``, a plain method. If a step raises, APScheduler logs it and
the next tick retries: no bare ``except`` keeps a broken loop spinning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler

from spotfleet.api.app import create_app
from spotfleet.clock import Clock, SystemClock
from spotfleet.config import Config
from spotfleet.controller.controller import Controller
from spotfleet.controller.settings import PlanSettings
from spotfleet.model.snapshot import Budget
from spotfleet.policies.base import Policy
from spotfleet.providers.registry import build_providers
from spotfleet.store import Store

log = logging.getLogger(__name__)


def make_policy(config: Config) -> Policy:
    """``spotfleet`` (default): cost per unit of useful work, deadlines, budgets,
    preemption, consolidation. ``simple``: cheapest fit by class (the skeleton's)."""
    if config.policy == "simple":
        from spotfleet.policies.simple import SimplePolicy

        return SimplePolicy(idle_ttl=config.reconcile.idle_ttl)
    from dataclasses import replace

    from spotfleet.policies.knobs import DEFAULT_KNOBS
    from spotfleet.policies.spotfleet import SpotfleetPolicy

    return SpotfleetPolicy(replace(DEFAULT_KNOBS, idle_ttl_s=config.reconcile.idle_ttl.total_seconds()))


def budgets_of(config: Config) -> list[Budget]:
    out = []
    if config.budgets.global_per_hour is not None:
        out.append(Budget(config.budgets.global_per_hour))
    out.extend(Budget(cap, tenant=t) for t, cap in sorted(config.budgets.tenants.items()))
    return out


class Service:
    def __init__(self, config: Config, *, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        data_dir = config.data_path
        data_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(config.database_url)
        self.store.migrate()
        r = config.reconcile
        self.providers = build_providers(config.providers, cluster=config.cluster, clock=self.clock, data_dir=data_dir)
        self.controller = Controller(
            store=self.store, providers=self.providers, policy=make_policy(config), clock=self.clock,
            cluster=config.cluster, data_dir=data_dir, checkpoint_root=config.checkpoint_root,
            settings=PlanSettings(idle_ttl=r.idle_ttl, agent_timeout=r.agent_timeout, boot_timeout=r.boot_timeout),
            budgets=budgets_of(config), heartbeat_seconds=r.heartbeat.total_seconds(), offerings_ttl=r.offerings_ttl,
        )  # fmt: skip
        self.controller.wake = self.wake
        self.app = create_app(self.controller, api_token=config.api.token)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host=config.api.host, port=config.api.port,
                                                    log_level="warning", lifespan="off"))  # fmt: skip
        self.scheduler = BackgroundScheduler(timezone=UTC)
        # wakes that land while a step runs are coalesced on purpose (see _reconcile)
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
        self._dirty = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ scheduling

    def _reconcile(self) -> None:
        for _ in range(10):  # bounded: a storm of wakes cannot starve the interval
            self._dirty.clear()
            self.controller.step()
            if not self._dirty.is_set():
                return

    def wake(self) -> None:
        """Run a reconcile step as soon as possible (coalesced)."""
        self._dirty.set()
        if self.scheduler.running:
            job = self.scheduler.get_job("reconcile")
            if job is not None:
                job.modify(next_run_time=datetime.now(UTC))

    def _start_scheduler(self) -> None:
        interval = self.config.reconcile.interval.total_seconds()
        self.scheduler.add_job(self._reconcile, "interval", seconds=interval, id="reconcile", max_instances=1,
                               coalesce=True, next_run_time=datetime.now(UTC), misfire_grace_time=None)  # fmt: skip
        self.scheduler.add_job(lambda: self.controller.offerings(refresh=True), "interval",
                               seconds=self.config.reconcile.offerings_ttl.total_seconds(), id="offerings",
                               max_instances=1, coalesce=True)  # fmt: skip
        self.scheduler.start()

    def _advertise(self) -> None:
        host, port = self.config.api.host, self.bound_port
        self.controller.controller_url = self.config.api.advertise_url or f"http://{_url_host(host)}:{port}"

    @property
    def bound_port(self) -> int:
        for server in self.server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return self.config.api.port

    # ------------------------------------------------------------ run

    def start_background(self, *, timeout: float = 20.0) -> None:
        """API in a thread and the scheduler running; returns once serving."""
        self._thread = threading.Thread(target=self.server.run, name="spotfleet-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the API did not start on {self.config.api.host}:{self.config.api.port}")
            time.sleep(0.02)
        self._advertise()
        self._start_scheduler()

    def run_forever(self, *, on_ready: Callable[[], None] = lambda: None) -> None:
        """``spotfleet up``: serve until Ctrl-C, then stop cleanly."""
        self.start_background()
        on_ready()
        try:
            while self._thread is not None and self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def stop(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.store.close()

    @property
    def url(self) -> str:
        return f"http://{_url_host(self.config.api.host)}:{self.bound_port}"

    def info(self) -> dict[str, Any]:
        return {"url": self.url, "database": self.store.url, "providers": sorted(self.providers)}


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
