"""What AWS placement groups and GCE compact placement policies share.

Both clouds' gang placement objects live and die the same way: created for a
gang on its first launch, and garbage-collected by the periodic listing once no
instance names them and they are older than ``GROUP_GRACE`` (a younger one may be
between its creation and its gang's launch). The listing runs every few
seconds, so collection is paced per region (``CollectionPacer``); the cloud
specifics stay in ``aws_placement`` and ``gcp_placement``.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

TAG_PLACEMENT_GROUP = "spotfleet:placement-group"  # on every gang member: its group's name
GROUP_GRACE = timedelta(minutes=15)
COLLECT_EVERY = timedelta(minutes=1)


class CollectionPacer:
    """At most one garbage collection per region every ``every`` (thread-safe)."""

    def __init__(self, every: timedelta = COLLECT_EVERY) -> None:
        self._every = every
        self._lock = threading.Lock()
        self._last: dict[str, datetime] = {}

    def due(self, region: str, now: datetime, *, force: bool = False) -> bool:
        """True (and the clock restarts) when ``region`` may be collected now."""
        with self._lock:
            last = self._last.get(region)
            if not force and last is not None and now - last < self._every:
                return False
            self._last[region] = now
            return True
