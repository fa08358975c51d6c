"""A replica frozen inside a transaction must not hold its locks for as long as
the freeze lasts: with ``idle_in_transaction`` the server ends that transaction,
and a successor waiting on the same lock gets it (the HA take-over's case:
a leader SIGSTOPped mid-step holds the lease row ``FOR SHARE``)."""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text

from spotfleet.store import Store

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("limit", [timedelta(seconds=1), None])
def test_a_frozen_transaction_releases_its_lock_only_with_the_limit(pg_url: str, limit: timedelta | None) -> None:
    store = Store(pg_url, idle_in_transaction=limit)
    other = create_engine(pg_url, connect_args={"options": "-c lock_timeout=4000"})
    frozen = store.engine.connect()
    try:
        frozen.begin()
        frozen.execute(text("SELECT pg_advisory_xact_lock(4242)"))  # then the client goes quiet
        t0 = time.monotonic()
        with other.connect() as conn:
            if limit is None:
                with pytest.raises(Exception, match="lock timeout"):
                    conn.execute(text("SELECT pg_advisory_xact_lock(4242)"))
            else:
                conn.execute(text("SELECT pg_advisory_xact_lock(4242)"))
                assert time.monotonic() - t0 < 3.0, "the server ended the quiet transaction at its limit"
    finally:
        with contextlib.suppress(Exception):  # the server may have closed it already
            frozen.close()
        store.close()
        other.dispose()
