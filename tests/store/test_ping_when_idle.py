"""``ping_when_idle``: a pooled PostgreSQL connection is pinged before it is lent
only after sitting idle (a dead one is then replaced); a busy one is not pinged,
so an agent heartbeat costs PostgreSQL one transaction, not two."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, text

from spotfleet.store.store import ping_when_idle

pytestmark = pytest.mark.postgres


def _pid(engine: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_an_idle_connection_killed_under_the_pool_is_replaced_not_lent(pg_url: str) -> None:
    engine = create_engine(pg_url, pool_size=1, max_overflow=0)
    ping_when_idle(engine, idle=0.0)  # every returned connection counts as idle
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        first = _pid(engine)
        with admin.connect() as conn:  # the database drops it (a restart, a proxy's idle timeout)
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": first}).scalar_one()
        assert _pid(engine) != first  # pinged, found dead, replaced: the caller never sees the error
    finally:
        engine.dispose()
        admin.dispose()


def test_a_connection_used_a_moment_ago_is_lent_without_a_ping(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = create_engine(pg_url, pool_size=1, max_overflow=0)
    ping_when_idle(engine)  # the default: pinged after 10 s idle
    pings: list[object] = []
    real = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda c: pings.append(c) or real(c))
    try:
        pids = {_pid(engine) for _ in range(20)}
        assert len(pids) == 1 and pings == []
        record = engine.pool._pool.queue[0]  # type: ignore[attr-defined]  # the one pooled connection
        record.info["returned_at"] -= 60.0  # as if it had sat idle a minute
        assert _pid(engine) in pids and len(pings) == 1
    finally:
        engine.dispose()
