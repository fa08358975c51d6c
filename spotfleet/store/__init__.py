"""Persistence: SQLAlchemy 2 with Alembic migrations; SQLite by default, PostgreSQL by URL."""

from spotfleet.store.store import Store, normalize_url

__all__ = ["Store", "normalize_url"]
