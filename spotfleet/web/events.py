"""The Events page: the controller's audit log, filtered, refreshed live.

Design choice: the browser polls (htmx, every 2 s) rather than holding a
server-sent-events stream. A poll is one indexed query for the newest rows;
it survives a controller restart or a proxy's idle timeout with no reconnect
logic, holds no server thread between polls, and needs no event ids the store
does not already have. The filters are the query string, so a filtered view
is a link.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotfleet.api.principal import Principal
from spotfleet.model.changes import EventRecord
from spotfleet.store.store import Store

KINDS = ("", "job.", "instance.", "plan.", "provider.")
LEVELS = ("", "info", "warning", "error")
LIMITS = (50, 200, 1000)


@dataclass(frozen=True, slots=True)
class EventFilters:
    kind: str = ""
    level: str = ""
    job: str = ""
    instance: str = ""
    tenant: str = ""
    limit: int = 200

    def query(self) -> dict[str, str]:
        pairs = (("kind", self.kind), ("level", self.level), ("job", self.job), ("instance", self.instance),
                 ("tenant", self.tenant))  # fmt: skip
        out = {k: v for k, v in pairs if v}
        if self.limit != LIMITS[1]:
            out["limit"] = str(self.limit)
        return out


def list_events(store: Store, principal: Principal, filters: EventFilters) -> list[EventRecord]:
    """Newest first. A tenant principal sees its own jobs' events only."""
    tenant = principal.tenant if not principal.all_tenants else (filters.tenant or None)
    if not principal.all_tenants and filters.tenant and filters.tenant != principal.tenant:
        return []
    limit = filters.limit if filters.limit in LIMITS else LIMITS[1]
    found = store.events(limit=limit, job_id=filters.job or None, instance_id=filters.instance or None,
                         kind_prefix=filters.kind or None, level=filters.level or None, tenant=tenant)  # fmt: skip
    return found[::-1]
