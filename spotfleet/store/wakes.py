"""Wakes across replicas: PostgreSQL ``LISTEN``/``NOTIFY``.

A follower serves the inbox (submissions, cancels, agent reports) but does not
step; without this the leader would see a follower's news only at its next
interval tick (``reconcile.interval``, 5 s by default). A follower's wake is a
``NOTIFY`` on the cluster's channel; every replica ``LISTEN``s on it and wakes
its own step (a no-op on followers). The listener never notifies, so a wake
cannot bounce between replicas. SQLite is single-controller: nothing to do.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.engine import make_url

from spotfleet.store.store import Store

log = logging.getLogger(__name__)


def channel(cluster: str) -> str:
    """The cluster's channel: a plain identifier whatever the cluster's name is."""
    return "spotfleet_wake_" + hashlib.sha256(cluster.encode()).hexdigest()[:16]


def notify(store: Store, cluster: str) -> None:
    """Wake every replica's step (PostgreSQL; a no-op elsewhere)."""
    if store.dialect != "postgresql":
        return
    with store.engine.begin() as conn:
        conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": channel(cluster)})


class WakeListener:
    """A thread holding one autocommit connection that ``LISTEN``s for wakes and
    calls ``on_wake`` for each (reconnecting after a database outage)."""

    def __init__(self, store: Store, cluster: str, on_wake: Callable[[], None]) -> None:
        self.conninfo = make_url(store.url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.channel = channel(cluster)
        self.on_wake = on_wake
        self.listening = threading.Event()  # set once LISTEN is in place (tests wait on it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spotfleet-wakes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.listening.set()
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=1.0):
                            self.on_wake()
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning("listening for wakes failed (retrying): %s", str(exc).splitlines()[0] if str(exc) else exc)
                self._stop.wait(2.0)


class Notifier:
    """``wake()`` from any thread; one thread sends the ``NOTIFY``s, coalescing a
    burst into one (an API worker process: a thousand submissions a second must
    not cost the database a thousand extra transactions, nor a request the
    round trip). A wake arriving while a ``NOTIFY`` is in flight sends one more
    after it, so the last news is never left without a wake."""

    def __init__(self, store: Store, cluster: str, *, min_gap: float = 0.01) -> None:
        self.store, self.cluster, self.min_gap = store, cluster, min_gap
        self.sent = 0
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spotfleet-notify", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._pending.set()

    def stop(self) -> None:
        self._stop.set()
        self._pending.set()
        self._thread.join(5)

    def _run(self) -> None:
        while True:
            self._pending.wait()
            if self._stop.is_set():
                return
            self._pending.clear()
            try:
                notify(self.store, self.cluster)
                self.sent += 1
            except Exception as exc:  # the leader's interval tick still sees the news
                log.warning("could not wake the step: %s", str(exc).splitlines()[0] if str(exc) else exc)
            self._stop.wait(self.min_gap)
