"""API worker processes: the HTTP API in N processes in front of one step process.

Why: the reconcile step is CPU-bound Python. In one process the API waits for
the GIL while a step plans over a large backlog — 2,000 agents heartbeating
every 2 s got ~120 answers/s and 9 s latency behind 5 s steps. With
``api.workers: N`` (``spotfleet up --api-workers N``, PostgreSQL only),
``spotfleet up`` binds the port, starts N worker processes that accept on that
one socket (the kernel hands each connection to one of them) and itself runs
only the lease, the scheduler and the step.

- A worker is an API like a follower's: reads, and inbox writes (submissions,
  cancels, agent heartbeats), each in its own transaction. It never steps and
  never calls a cloud to buy or end anything. Its wakes reach the step over
  ``NOTIFY`` (``store/wakes.py``), coalesced per worker.
- What only the step process knows — whether this replica leads, its epoch,
  when it last stepped and how long steps take — it publishes to a small
  shared-memory block (``ReplicaState``) after every lease tick and step;
  workers answer ``/healthz``, ``/readyz``, ``/metrics`` and the dashboard
  from it. A lease that has run out in the block reads as ``follower``, so a
  frozen step process is not reported as leading.
- No orphans: a worker asks the kernel for SIGTERM when the step process dies
  (``PR_SET_PDEATHSIG``, even on kill -9) and also watches its parent's pid.
  The step process restarts a worker that exits.

Workers are started with the ``spawn`` method: a fresh interpreter, no copied
threads, locks or database connections.

Known gap: ``explain`` served by a worker plans without the spot-availability
runs the step process has observed in memory (``controller/availability.py``),
so its forecast column starts from the prior until those runs are stored.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import TYPE_CHECKING, Any

from spotfleet.controller.controller import Controller
from spotfleet.errors import Fenced

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event

    from spotfleet.config import Config

log = logging.getLogger(__name__)

STATE_BYTES = 64 * 1024


class ReplicaState:
    """A JSON document in shared memory: written by the step process, read by its
    workers. A sequence lock, not a shared mutex: a worker killed mid-read must
    not leave a lock held that the step process's lease thread then waits on
    forever. The writer makes the sequence odd, writes, makes it even; a reader
    retries until it copied the document between two equal, even readings."""

    def __init__(self, ctx: SpawnContext) -> None:
        self._seq = ctx.RawValue(ctypes.c_uint64, 0)
        self._buf = ctx.RawArray(ctypes.c_char, STATE_BYTES)
        self._writer = threading.Lock()  # the lease thread and the step both publish

    def __getstate__(self) -> dict[str, Any]:  # sent to a spawned worker: the shared blocks, not the lock
        return {"_seq": self._seq, "_buf": self._buf}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._writer = threading.Lock()

    def publish(self, state: dict[str, Any]) -> None:
        data = json.dumps(state, default=str).encode()
        if len(data) >= STATE_BYTES:
            raise ValueError(f"replica state of {len(data)} bytes does not fit in {STATE_BYTES}")
        with self._writer:
            self._seq.value += 1
            self._buf.value = data
            self._seq.value += 1

    def read(self) -> dict[str, Any]:
        for _ in range(1000):
            before = self._seq.value
            if before % 2 == 0:
                data = self._buf.value
                if self._seq.value == before:
                    return json.loads(data) if data else {}
            time.sleep(0)
        raise TimeoutError("the replica state stayed mid-write")  # a writer that died mid-write: never on a live step


class PublishedLeadership:
    """An API worker's view of its replica's lease, as the step process published
    it. It only reports: ``check`` refuses, so a worker can never pass a fence."""

    def __init__(self, state: ReplicaState) -> None:
        self.state = state

    def status(self) -> dict[str, Any]:
        lease = self.state.read().get("lease") or {"role": "follower", "epoch": None, "identity": None, "leader": {}}
        expires = lease.get("expires_at")
        if lease.get("role") == "leader" and (expires is None or datetime.fromisoformat(expires) <= datetime.now(UTC)):
            lease = {**lease, "role": "follower"}  # the step process stopped renewing (frozen, or dying)
        lease.pop("expires_at", None)
        return lease

    @property
    def is_leader(self) -> bool:
        return bool(self.status()["role"] == "leader")

    def check(self, session: Any) -> None:
        raise Fenced("an API worker never steps")


class WorkerController(Controller):
    """The controller an API worker serves: everything the routes need, answered
    from the store; health from what the step process published; no step."""

    published: ReplicaState

    def step(self) -> Any:
        raise RuntimeError("an API worker does not run reconcile steps; the step process does")

    def health(self) -> dict[str, Any]:
        steps = self.published.read().get("health") or {}
        self.started_at = _when(steps.get("started_at")) or self.started_at
        self.last_step_at = _when(steps.get("last_step_at"))
        self.last_step_error = steps.get("last_step_error")
        return super().health()


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


# ---------------------------------------------------------------- the worker process


def serve(config: Config, sock: socket.socket, state: ReplicaState, ready: Event, parent: int, index: int,
          log_format: str) -> None:  # fmt: skip
    """A worker's main: die with the step process, build the API, serve until told to stop.

    The step process decides when its workers stop (SIGTERM). A terminal's Ctrl-C
    or a service manager's SIGINT reaches the whole process group; a worker
    ignores it and lets the step process stop it in order."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent)
    from spotfleet import redact
    from spotfleet.decisions import configure_logging, log_decisions

    configure_logging(log_format)
    redact.install()
    import uvicorn

    from spotfleet.api.app import create_app
    from spotfleet.api.auth import token_resolver
    from spotfleet.clock import SystemClock
    from spotfleet.providers.registry import build_providers
    from spotfleet.service import build_controller
    from spotfleet.store import Store
    from spotfleet.store.wakes import Notifier

    clock = SystemClock()
    store = Store(config.database_url, idle_in_transaction=config.ha.lease_ttl)
    store.event_listeners.append(log_decisions)  # what agents report, in `up`'s log as without workers
    providers = build_providers(config.providers, cluster=config.cluster, clock=clock, data_dir=config.data_path)
    controller = build_controller(config, store, providers, clock=clock, cls=WorkerController,
                                  controller_url=lambda: str(state.read().get("advertised_url", "")))  # fmt: skip
    assert isinstance(controller, WorkerController)
    controller.published = state
    controller.elector = PublishedLeadership(state)
    controller.step_interval = config.reconcile.interval
    notifier = Notifier(store, config.cluster)
    controller.wake = notifier.wake
    resolver = token_resolver(store, legacy_token=config.api.token, open_without_token=config.api.token is None)
    app = create_app(controller, principals=resolver, max_body=config.api.max_body_bytes,
                     leadership=lambda: dict(state.read().get("leadership") or {}),
                     published_steps=lambda: dict(state.read().get("steps") or {}))  # fmt: skip
    server = _worker_server_class()(uvicorn.Config(app, log_level="warning", lifespan="off"))

    def announce() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.02)
        if server.started:
            log.info("API worker %d (pid %d) serves", index, os.getpid())
            ready.set()

    threading.Thread(target=announce, name="spotfleet-ready", daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        notifier.stop()
        store.close()


def _worker_server_class() -> type:
    import uvicorn

    class WorkerServer(uvicorn.Server):
        """uvicorn, stopping on SIGTERM only (its own handlers would also take SIGINT
        and re-raise it after the shutdown, as a KeyboardInterrupt traceback)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            previous = signal.signal(signal.SIGTERM, lambda _sig, _frame: setattr(self, "should_exit", True))
            try:
                yield
            finally:
                signal.signal(signal.SIGTERM, previous)

    return WorkerServer


def _die_with(parent: int) -> None:
    """SIGTERM when the step process dies (Linux's parent-death signal; uvicorn
    stops cleanly on it), and a watchdog for kernels without it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="spotfleet-parent-watch", daemon=True).start()


# ---------------------------------------------------------------- the step process's side


class ApiWorkers:
    """Starts N workers on one listening socket, restarts any that exits, stops
    them all (SIGTERM, then SIGKILL after ``grace``)."""

    def __init__(self, config: Config, sock: socket.socket, *, count: int, log_format: str = "text") -> None:
        self.config, self.sock, self.count, self.log_format = config, sock, count, log_format
        self.ctx = multiprocessing.get_context("spawn")
        self.state = ReplicaState(self.ctx)
        self.procs: list[SpawnProcess | None] = [None] * count
        self.ready: list[Event] = [self.ctx.Event() for _ in range(count)]
        self.restarts = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, *, timeout: float = 60.0) -> None:
        """Start every worker from one long-lived thread (a parent-death signal fires
        when the *thread* that started the child ends) and wait until all serve."""
        self._thread = threading.Thread(target=self._supervise, name="spotfleet-workers", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        for i, event in enumerate(self.ready):
            if not event.wait(max(0.0, deadline - time.monotonic())):
                proc = self.procs[i]
                code = proc.exitcode if proc is not None else None
                raise RuntimeError(f"API worker {i} did not start within {timeout:.0f}s (exit code {code})")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None and p.pid is not None and p.is_alive()]

    def _spawn(self, index: int) -> None:
        self.ready[index].clear()
        proc = self.ctx.Process(
            target=serve, name=f"spotfleet-api-{index}", daemon=True,  # terminated, not joined, at exit
            args=(self.config, self.sock, self.state, self.ready[index], os.getpid(), index, self.log_format),
        )  # fmt: skip
        proc.start()
        self.procs[index] = proc

    def _supervise(self) -> None:
        """Restart a worker that has been gone a second: not sooner, so a Ctrl-C or a
        service manager's stop, which reaches the workers with the step process, is
        not answered by a respawn (and a worker that dies at once is not a hot loop)."""
        with self._lock:
            for i in range(self.count):
                self._spawn(i)
        gone_since: dict[int, float] = {}
        while not self._stop.wait(0.25):
            with self._lock:
                for i, proc in enumerate(self.procs):
                    if proc is None or proc.is_alive():
                        gone_since.pop(i, None)
                        continue
                    since = gone_since.setdefault(i, time.monotonic())
                    if self._stop.is_set() or time.monotonic() - since < 1.0:
                        continue
                    log.warning("API worker %d (pid %s) exited with code %s: restarting it", i, proc.pid,
                                proc.exitcode)  # fmt: skip
                    self.restarts += 1
                    gone_since.pop(i)
                    self._spawn(i)
        self._terminate()

    def _terminate(self, grace: float = 10.0) -> None:
        with self._lock:
            live = [p for p in self.procs if p is not None and p.is_alive()]
            for proc in live:
                proc.terminate()
            deadline = time.monotonic() + grace
            for proc in live:
                proc.join(max(0.0, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.kill()
                    proc.join(2)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
