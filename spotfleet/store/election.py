"""Leader election with fencing for replicated controllers, on the database we
already have.

One ``controller_lease`` row per cluster holds (holder, epoch, expires_at). Each
replica calls ``Elector.tick()`` every ``renew`` seconds (the service's lease
thread): the holder extends ``expires_at``; any replica takes over a lease that
has expired by *raising the epoch*. Only the leader runs ``Controller.step()``
and the executor; followers serve the API (reads and inbox writes).

Design choice — fencing, not just election: a leader can be paused (GC, SIGSTOP,
a VM migration) past its lease and resume mid-step believing it still leads.
So every transaction of a step first reads the lease row ``FOR SHARE`` and
raises ``Fenced`` unless (holder, epoch) are still ours (``check``), and the
executor calls ``verify()`` right before each cloud launch/terminate. A
take-over updates that row, so on PostgreSQL it waits for any step transaction
that already passed the check, and every later check sees the new epoch: an
ex-leader can neither write nor call a cloud after a successor took over. (The
window between ``verify()`` and the cloud call is closed by idempotence: a
launch carries its request id, which the successor adopts.)

Expiry compares the replicas' clocks (injected; ``SystemClock`` in service):
keep them NTP-synced to well under the TTL. Failover takes at most
``ttl + renew`` after the leader stops renewing.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import create_engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from spotfleet.clock import Clock
from spotfleet.errors import Fenced
from spotfleet.store.schema import ControllerLeaseRow
from spotfleet.store.store import Store

log = logging.getLogger(__name__)


class Leadership(Protocol):
    """What a controller asks of its lease: do we lead, who leads (``/healthz``),
    and the fence its step's transactions run (``Elector``; an API worker's
    ``PublishedLeadership`` only reports, and its ``check`` always refuses)."""

    @property
    def is_leader(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    def check(self, session: Session) -> None: ...


def default_identity() -> str:
    """host:pid:random — unique per process, readable in logs and /healthz."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Elector:
    def __init__(
        self,
        store: Store,
        *,
        cluster: str,
        clock: Clock,
        ttl: timedelta = timedelta(seconds=10),
        identity: str | None = None,
        info: dict[str, Any] | None = None,
        exclusive: bool = False,
    ) -> None:
        """``exclusive``: this process already holds the database alone (SQLite's
        file lock), so a lease left by a dead predecessor is taken at once."""
        self.store = store
        self.cluster = cluster
        self.clock = clock
        self.ttl = ttl
        self.identity = identity or default_identity()
        self.info: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), **(info or {})}
        self.exclusive = exclusive
        self.epoch: int | None = None  # set while we hold the lease
        self.expires_at: datetime | None = None
        self.leader: dict[str, Any] = {}  # the holder as last seen (us or another replica)
        # the lease has connections of its own: a busy API (heartbeats holding the
        # store's pool) must never delay a renewal or a take-over
        self._engine = None
        if store.dialect == "postgresql":
            # a take-over waits for a frozen leader's step transaction only until the
            # server ends it (the store's idle-in-transaction limit), and never longer
            # than a TTL at a time: the lease thread must come back to renew or retry; and a
            # replica frozen inside its own renewal (the row FOR UPDATE) holds it a TTL at most
            wait_ms = max(1, int(ttl.total_seconds() * 1000))
            self._engine = create_engine(store.url, pool_size=1, max_overflow=2, pool_pre_ping=True, pool_timeout=5,
                                         connect_args={"options": f"-c lock_timeout={wait_ms} "
                                                               f"-c idle_in_transaction_session_timeout={wait_ms}"})  # fmt: skip
            self._sessions: Callable[[], Session] = sessionmaker(self._engine)
        else:
            self._sessions = store.session
        self.on_elected: Callable[[int], None] = lambda _epoch: None
        self.on_deposed: Callable[[str], None] = lambda _why: None

    # ------------------------------------------------------------ state

    @property
    def is_leader(self) -> bool:
        return self.epoch is not None and self.expires_at is not None and self.clock.now() < self.expires_at

    def status(self) -> dict[str, Any]:
        return {
            "role": "leader" if self.is_leader else "follower",
            "epoch": self.epoch if self.is_leader else self.leader.get("epoch"),
            "identity": self.identity,
            "leader": dict(self.leader),
        }

    # ------------------------------------------------------------ the lease

    def tick(self) -> bool:
        """Acquire or renew the lease (one transaction); returns ``is_leader``."""
        held = self.epoch
        was = held is not None  # held a lease, even one that ran out while we were paused
        try:
            got = self._tick()
        except IntegrityError:
            got = False  # two replicas inserted the first row at once: the other won
        except OperationalError as exc:  # the database is away: we cannot prove we lead
            log.warning("cannot renew the controller lease: %s", str(exc).splitlines()[0])
            got = self.is_leader  # keep acting until our own expiry, no longer
        if got and (not was or self.epoch != held):
            assert self.epoch is not None
            log.info("this replica leads (epoch %d, %s)", self.epoch, self.identity)
            self.on_elected(self.epoch)
        elif was and not got:
            self._depose(f"lease lost to {self.leader.get('holder', '?')}")
        return got

    def _tick(self) -> bool:
        now = self.clock.now()
        with self._sessions() as s, s.begin():
            row = s.get(ControllerLeaseRow, self.cluster, with_for_update=True)
            if row is None:
                row = ControllerLeaseRow(cluster=self.cluster, holder=self.identity, epoch=1, expires_at=now + self.ttl,
                                         renewed_at=now, info=self.info)  # fmt: skip
                s.add(row)
                s.flush()
            elif row.holder == self.identity and row.epoch == self.epoch:
                row.expires_at, row.renewed_at = now + self.ttl, now
            elif row.expires_at <= now or self.exclusive:
                row.holder, row.epoch, row.info = self.identity, row.epoch + 1, self.info
                row.expires_at, row.renewed_at = now + self.ttl, now
            else:
                self.epoch, self.expires_at = None, None
                self.leader = _holder(row)
                return False
            self.epoch, self.expires_at = row.epoch, now + self.ttl
            self.leader = _holder(row)
            return True

    def next_tick_in(self, every: float) -> float:
        """Seconds until the next ``tick``: ``every`` while leading; a follower also
        wakes just after the leader's lease runs out, so failover takes about the
        TTL after the leader's last renewal, not TTL + ``every``."""
        if self.is_leader or "expires_at" not in self.leader:
            return every
        until = (datetime.fromisoformat(self.leader["expires_at"]) - self.clock.now()).total_seconds()
        return max(0.05, min(every, until + 0.05))

    def release(self) -> None:
        """A clean stop: expire our lease now so a follower takes over at its next tick."""
        if self.epoch is None:
            return
        epoch, self.epoch, self.expires_at = self.epoch, None, None
        try:
            with self._sessions() as s, s.begin():
                row = s.get(ControllerLeaseRow, self.cluster, with_for_update=True)
                if row is not None and row.holder == self.identity and row.epoch == epoch:
                    row.expires_at = self.clock.now()
        except OperationalError:
            pass  # it expires by itself

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    # ------------------------------------------------------------ fencing

    def check(self, session: Session) -> None:
        """Inside a step's transaction: raise ``Fenced`` unless our epoch still holds."""
        if self.epoch is None:
            raise Fenced(f"{self.identity} is not the leader")
        row = session.get(ControllerLeaseRow, self.cluster, with_for_update={"read": True}, populate_existing=True)
        if row is None or row.holder != self.identity or row.epoch != self.epoch:
            why = f"epoch {self.epoch} is stale (the lease is at epoch {row.epoch if row else '-'})"
            self._depose(f"fenced: {why}")
            raise Fenced(why)

    def verify(self) -> None:
        """Right before a cloud call: ``check`` in a transaction of its own."""
        with self._sessions() as s, s.begin():
            self.check(s)

    def _depose(self, why: str) -> None:
        log.warning("this replica no longer leads: %s", why)
        self.epoch, self.expires_at = None, None
        self.on_deposed(why)


def _holder(row: ControllerLeaseRow) -> dict[str, Any]:
    return {"holder": row.holder, "epoch": row.epoch, "expires_at": row.expires_at.isoformat(), **(row.info or {})}
