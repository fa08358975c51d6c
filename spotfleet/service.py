"""Assembles a running controller from a ``Config``: store, providers, policy,
controller, the HTTP API (uvicorn) and the scheduler (APScheduler).

APScheduler only *triggers* reconcile steps — on an interval, and at once when
something happens (a submission, an agent report). The step itself is
``Controller.step()``, a plain method. If a step raises, APScheduler logs it and
the next tick retries: no bare ``except`` keeps a broken loop spinning.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler

from spotfleet.api.app import create_app
from spotfleet.api.auth import token_resolver
from spotfleet.api.workers import ApiWorkers
from spotfleet.clock import Clock, SystemClock
from spotfleet.config import Config
from spotfleet.controller.availability import AvailabilityLog
from spotfleet.controller.controller import Controller
from spotfleet.controller.pacing import StepPacer
from spotfleet.controller.settings import PlanSettings
from spotfleet.errors import ControllerLocked, InvalidSpec, PortInUse
from spotfleet.extras import requires
from spotfleet.files import private_database, private_dir
from spotfleet.metrics import FleetMetrics
from spotfleet.model.snapshot import Budget, provider_of_key
from spotfleet.policies.base import Policy
from spotfleet.providers.base import Provider
from spotfleet.providers.registry import build_providers
from spotfleet.store import Store
from spotfleet.store.election import Elector
from spotfleet.store.wakes import WakeListener, notify

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


def build_controller(
    config: Config,
    store: Store,
    providers: dict[str, Provider],
    *,
    clock: Clock,
    controller_url: Callable[[], str],
    cls: type[Controller] = Controller,
) -> Controller:
    """The controller a config describes (the step process's, or an API worker's: ``cls``)."""
    r = config.reconcile
    return cls(
        store=store, providers=providers, policy=make_policy(config), clock=clock, cluster=config.cluster,
        data_dir=config.data_path, controller_url=controller_url, checkpoint_root=config.checkpoint_root,
        settings=PlanSettings(agent_timeout=r.agent_timeout, boot_timeout=r.boot_timeout),
        budgets=budgets_of(config), heartbeat_seconds=r.heartbeat.total_seconds(), offerings_ttl=r.offerings_ttl,
        partition_policy=config.gpu_partitioning.policy(),
    )  # fmt: skip


def market_history_log(paths: Iterable[Path]) -> AvailabilityLog:
    """An availability log that has learned the spot traces at ``paths``
    (``config.market_history``), for the controller to start from.

    The log is in memory and a new controller starts from the priors; a trace
    of the same pools (a public one, or an earlier export) gives it their run
    lengths from the first step — the up share, mean up and down runs and
    ``remaining_up_h`` that the deadline rules read. Pools match by
    ``Offering.key``, so a trace's ``cloud`` must be the provider's name in the
    config. Each file is replayed as a closed period
    (``AvailabilityLog.replay(detached=True)``): its hours and runs count, its
    last open run does not. Read before anything is opened, so a bad path
    fails the start with nothing to undo."""
    log = AvailabilityLog()
    paths = [Path(p).expanduser() for p in paths]
    if not paths:
        return log  # the simulator's numpy is needed only to read traces
    with requires("sim", "market_history (learning spot run lengths from trace files)"):
        from spotfleet.sim.traces import InvalidTrace, availability_history, load_traces
    for where in paths:
        if not where.exists():
            raise InvalidSpec("market_history", f"{where} does not exist: give trace files or folders of them")
        try:
            traces = load_traces([where])
        except InvalidTrace as exc:
            raise InvalidSpec(
                "market_history", f"{exc.source or where}: {exc.field or 'file'}: {exc.message}"
            ) from None
        log.replay(availability_history(traces, first_tick=0, end_tick=traces.n_ticks), detached=True)
    return log


def unmatched_history_clouds(history: AvailabilityLog, providers: Iterable[str]) -> list[str]:
    """The clouds of learned history that no configured provider is named after.

    Pools match by ``Offering.key``, whose first part is the provider's name in
    the config, so a trace of cloud ``aws`` read by a controller whose AWS
    provider is called ``aws-east`` is learned and then never consulted: the
    operator is told instead of finding out from ``explain``."""
    names = set(providers)
    return sorted({provider_of_key(r.key) for r in history.records()} - names)


class Service:
    def __init__(self, config: Config, *, clock: Clock | None = None, log_format: str = "text") -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.log_format = log_format
        data_dir = config.data_path
        history = market_history_log(config.market_history)
        private_dir(data_dir)
        self.store = Store(config.database_url, idle_in_transaction=config.ha.lease_ttl)
        if config.api.workers and self.store.dialect != "postgresql":
            self.store.close()
            raise InvalidSpec("api.workers", f"API worker processes need PostgreSQL; {self.store.safe_url} is "
                              f"{self.store.dialect} (single-controller, one writer): set database to a "
                              "postgresql:// URL, or leave api.workers at 0")  # fmt: skip
        # SQLite is single-controller: hold the database file and the data dir alone
        self._locks = single_controller_locks(self.store, data_dir) if self.store.dialect == "sqlite" else []
        self.store.migrate()
        private_database(self.store)
        r = config.reconcile
        self.providers = build_providers(config.providers, cluster=config.cluster, clock=self.clock, data_dir=data_dir)
        self.controller = build_controller(config, self.store, self.providers, clock=self.clock,
                                           controller_url=self.advertised_url)  # fmt: skip
        self.controller.availability = history
        if config.market_history:
            pools = [r for r in history.records() if not r.key.endswith(":*")]
            log.info("market_history: learned %d spot pools (%d ended runs) from %d trace path(s)", len(pools),
                     sum(r.ended_runs for r in pools), len(config.market_history))  # fmt: skip
            for cloud in unmatched_history_clouds(history, config.providers):
                log.warning("market_history: the traces' cloud %r is no provider in this config (%s): its pools "
                            "are never used; name the provider %r under providers to use them", cloud,
                            ", ".join(sorted(config.providers)) or "none", cloud)  # fmt: skip
        self.controller.wake = self.wake
        self.controller.step_interval = r.interval
        self.elector = Elector(self.store, cluster=config.cluster, clock=self.clock, ttl=config.ha.lease_ttl,
                               exclusive=self.store.dialect == "sqlite")  # fmt: skip
        self.elector.on_elected = lambda _epoch: self.wake()
        self.controller.lead_with(self.elector)
        self._lease_stop = threading.Event()
        self._lease_thread: threading.Thread | None = None
        resolver = token_resolver(
            self.store, legacy_token=config.api.token, open_without_token=config.api.token is None
        )
        # api.workers > 0: the API runs in worker processes (api/workers.py); this one only steps
        # and publishes its step timings to them (instrumented before the unused in-process app)
        self.api_workers: ApiWorkers | None = None
        self.metrics = FleetMetrics(self.store, self.clock)
        if config.api.workers:
            self.metrics.instrument(self.controller)
        self.app = create_app(self.controller, principals=resolver, max_body=config.api.max_body_bytes,
                              leadership=self._leadership)  # fmt: skip
        self._sock: socket.socket | None = None
        self._stopped = threading.Event()
        self.server = uvicorn.Server(uvicorn.Config(self.app, host=config.api.host, port=config.api.port,
                                                    log_level="warning", lifespan="off"))  # fmt: skip
        self.scheduler = BackgroundScheduler(timezone=UTC)
        # wakes that land while a step runs are coalesced on purpose (controller/pacing.py)
        logging.getLogger("apscheduler.scheduler").setLevel(logging.ERROR)
        self.pacer = StepPacer()
        # replicas wake each other's step over LISTEN/NOTIFY (PostgreSQL only)
        self.wakes = (
            WakeListener(self.store, config.cluster, self._wake_here) if self.store.dialect == "postgresql" else None
        )
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ scheduling

    def _reconcile(self) -> None:
        self.pacer.started(time.monotonic())
        try:
            self.controller.step()
        finally:
            self._run_at(self.pacer.finished(time.monotonic()))
            self._publish()

    def _publish(self) -> None:
        """Tell the API workers what only this process knows (``ReplicaState``)."""
        if self.api_workers is None:
            return
        c, lease = self.controller, self.elector.status()
        lease["expires_at"] = (
            self.elector.expires_at.isoformat() if self.elector.is_leader and self.elector.expires_at else None
        )
        self.api_workers.state.publish({
            "lease": lease, "leadership": self._leadership(), "steps": self.metrics.step_histogram(),
            "advertised_url": self.advertised_url(),
            "health": {"started_at": c.started_at.isoformat(), "last_step_error": c.last_step_error,
                       "last_step_at": c.last_step_at.isoformat() if c.last_step_at else None},
        })  # fmt: skip

    def wake(self) -> None:
        """Run a reconcile step soon (coalesced and paced, see ``StepPacer``: a burst
        of submissions or registrations costs a few steps, not one each, and woken
        steps leave the API at least half of the controller's time). On a follower,
        wake the leader too (``store/wakes.py``), once per burst like the step."""
        if self.wakes is not None and not self.elector.is_leader and not self.pacer.pending:
            try:
                notify(self.store, self.config.cluster)
            except Exception as exc:  # the leader's interval tick still sees the news
                log.warning("could not wake the leader: %s", str(exc).splitlines()[0] if str(exc) else exc)
        self._wake_here()

    def _wake_here(self) -> None:
        self._run_at(self.pacer.wake(time.monotonic()))

    def _run_at(self, at: float | None) -> None:
        """Bring the interval job's next run to ``at`` (monotonic seconds)."""
        if at is None or not self.scheduler.running:
            return
        job = self.scheduler.get_job("reconcile")
        if job is not None:
            job.modify(next_run_time=datetime.now(UTC) + timedelta(seconds=max(0.0, at - time.monotonic())))

    def _leadership(self) -> dict[str, Any]:
        status = self.elector.status()
        leader = status["leader"]
        return {"role": status["role"], "replica": self.elector.identity, "cluster": self.config.cluster,
                "replicated": self.store.dialect != "sqlite", "epoch": status["epoch"],
                "leader": leader.get("holder"), "leader_url": leader.get("url")}  # fmt: skip

    def _lease_loop(self) -> None:
        every = self.config.ha.renew_every.total_seconds()
        while not self._lease_stop.wait(self.elector.next_tick_in(every)):
            self.elector.tick()
            self._publish()

    def _start_lease(self) -> None:
        self.elector.info["url"] = self.own_url
        self.elector.tick()  # lead at once when the lease is free (and always on SQLite)
        self._lease_thread = threading.Thread(target=self._lease_loop, name="spotfleet-lease", daemon=True)
        self._lease_thread.start()

    def _start_scheduler(self) -> None:
        interval = self.config.reconcile.interval.total_seconds()
        self.scheduler.add_job(self._reconcile, "interval", seconds=interval, id="reconcile", max_instances=1,
                               coalesce=True, next_run_time=datetime.now(UTC), misfire_grace_time=None)  # fmt: skip
        self.scheduler.add_job(lambda: self.controller.offerings(refresh=True), "interval",
                               seconds=self.config.reconcile.offerings_ttl.total_seconds(), id="offerings",
                               max_instances=1, coalesce=True)  # fmt: skip
        self.scheduler.start()

    def advertised_url(self) -> str:
        """The URL agents are given to reach this controller: ``api.advertise_url``
        (several replicas: all their URLs, comma-separated; agents fail over between
        them), else the bound address (known once the socket is bound: port 0 is allowed)."""
        return self.config.api.advertise_url or self.own_url

    @property
    def own_url(self) -> str:
        """This replica's own address (the leader's identity in /healthz)."""
        return f"http://{_url_host(self.config.api.host)}:{self.bound_port}"

    @property
    def bound_port(self) -> int:
        if self._sock is not None:
            return int(self._sock.getsockname()[1])
        for server in self.server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return self.config.api.port

    # ------------------------------------------------------------ run

    def start_background(self, *, timeout: float = 20.0) -> None:
        """API in a thread and the scheduler running; returns once serving.

        The listening socket is bound here, in the caller's thread, so a port
        already in use is one clear error (``PortInUse``) rather than a log line
        from uvicorn's thread and a timeout."""
        sock = self._bind()
        if self.config.api.workers:
            self._start_workers(sock)
            return
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, name="spotfleet-api",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the API did not start on {self.config.api.host}:{self.config.api.port}")
            time.sleep(0.02)
        self._start_lease()
        self._start_scheduler()
        if self.wakes is not None:
            self.wakes.start()

    def _start_workers(self, sock: socket.socket) -> None:
        """``api.workers``: this process leads or follows and steps; N processes serve."""
        self._sock = sock
        self.api_workers = ApiWorkers(self.config, sock, count=self.config.api.workers, log_format=self.log_format)
        self._start_lease()
        self._publish()
        self._start_scheduler()
        if self.wakes is not None:
            self.wakes.start()
        self.api_workers.start()
        log.info("API served by %d worker processes (pids %s)", self.config.api.workers,
                 ", ".join(map(str, self.api_workers.pids)))  # fmt: skip

    def _bind(self) -> socket.socket:
        host, port = self.config.api.host, self.config.api.port
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit it: no Nagle wait behind the client's delayed ACK
        # (uvicorn writes a response's head and body apart: 40 ms per request without it)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"{host}:{port} is already in use (another `spotfleet up`?): stop it, or choose "
                                "another port with --port or api.port") from None  # fmt: skip
            raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror} (api.host / --host)") from None
        return sock

    def run_forever(self, *, on_ready: Callable[[], None] = lambda: None) -> None:
        """``spotfleet up``: serve until Ctrl-C, then stop cleanly."""
        try:
            self.start_background()  # a Ctrl-C while the API workers start still stops them
            on_ready()
            while self._serving():
                self._stopped.wait(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def _serving(self) -> bool:
        if self.api_workers is not None:
            return not self._stopped.is_set()
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stopped.set()
        if self.api_workers is not None:
            self.api_workers.stop()  # no new inbox writes while the rest shuts down
        self._lease_stop.set()
        if self.wakes is not None:
            self.wakes.stop()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self._lease_thread is not None:
            self._lease_thread.join(5)
        self.elector.release()  # a follower takes over at its next tick, not after the TTL
        self.elector.close()
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        if self._sock is not None:
            self._sock.close()
        self.store.close()
        for lock in self._locks:
            lock.release()

    @property
    def url(self) -> str:
        return f"http://{_url_host(self.config.api.host)}:{self.bound_port}"

    def info(self) -> dict[str, Any]:
        return {"url": self.url, "database": self.store.safe_url, "providers": sorted(self.providers)}


def single_controller_locks(store: Store, data_dir: Path) -> list[ControllerLock]:
    """Exclusive locks on the SQLite file and the data dir, or ``ControllerLocked``
    naming the holder. The kernel drops them when the holder dies (even kill -9)."""
    db = store.engine.url.database
    locks = [(data_dir / "controller.lock", f"the data dir {data_dir}")]
    if db and db != ":memory:" and not db.startswith("file:"):
        locks.insert(0, (Path(db).expanduser().resolve().parent / f"{Path(db).name}.controller.lock",
                         f"the SQLite database {db}"))  # fmt: skip
    held: list[ControllerLock] = []
    try:
        for path, what in locks:
            held.append(ControllerLock.acquire(path, what=what))
    except ControllerLocked:
        for lock in held:
            lock.release()
        store.close()
        raise
    return held


class ControllerLock:
    """An ``flock`` on a file that also says who holds it (pid, host, since)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    @classmethod
    def acquire(cls, path: Path, *, what: str) -> ControllerLock:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 400, 0).decode("utf-8", errors="replace").strip() or "another process"
            os.close(fd)
            raise ControllerLocked(f"another controller already runs on {what}: {holder} — stop it first "
                                   "(SQLite is single-controller; replicate on PostgreSQL)") from None  # fmt: skip
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC\n"
                  .encode(), 0)  # fmt: skip
        return cls(path, fd)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the flock; the file stays (its text is stale, harmless)
            self.fd = -1


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
