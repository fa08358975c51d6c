"""Shared fixtures: the store on SQLite and PostgreSQL, clocks, the fake provider.

PostgreSQL runs at 127.0.0.1:5432 with trust auth (``.ci/run`` starts it). Each
test session creates its own database and drops it at the end, so parallel runs
never collide. Set ``SPOTFLEET_TEST_PG`` to another server URL, or to ``off`` to
skip the PostgreSQL half locally (CI never sets it).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from spotfleet.clock import FakeClock
from spotfleet.store import Store

PG_ADMIN = os.environ.get("SPOTFLEET_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    if PG_ADMIN == "off":
        pytest.skip("PostgreSQL disabled by SPOTFLEET_TEST_PG=off")
    name = f"spotfleet_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        pytest.fail(f"PostgreSQL at {PG_ADMIN} is not reachable ({exc}); start it or set SPOTFLEET_TEST_PG=off")
    base = PG_ADMIN.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _reset_pg(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated, empty store on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'spotfleet.db'}"
    else:
        url = request.getfixturevalue("pg_url")
        _reset_pg(url)
    s = Store(url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'spotfleet.db'}")
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
