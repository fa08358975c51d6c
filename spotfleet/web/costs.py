"""The Costs page: the ledger's numbers, the same as ``spotfleet cost report``.

Design choice: the page does not compute money of its own. It builds the ledger
with the same two calls as the CLI (``ledger.load.build`` then
``ledger.report.build_report``) and shows ``Sums.figures()`` — so the page,
``spotfleet cost report --format json`` and the CSV/FOCUS downloads agree to
the micro-dollar (a browser test compares them). A tenant principal gets the
same report over its own lines only: its jobs' attempts, without idle capacity.
"""

from __future__ import annotations

import csv
import io
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from spotfleet.api.principal import Principal
from spotfleet.clock import Clock
from spotfleet.errors import InvalidSpec
from spotfleet.ledger.attribution import Line
from spotfleet.ledger.load import LedgerData, build
from spotfleet.ledger.report import Report, build_report
from spotfleet.model.durations import parse_duration
from spotfleet.store.store import Store

GROUPINGS = ("tenant", "market")
WINDOWS = ("", "24h", "7d", "30d")  # "" = everything, as the CLI without --since


def visible(lines: Iterable[Line], principal: Principal) -> list[Line]:
    if principal.all_tenants:
        return list(lines)
    return [ln for ln in lines if ln.attempt is not None and ln.attempt.tenant == principal.tenant]


def parse_since(text: str, *, now: datetime) -> datetime | None:
    if not text:
        return None
    try:
        return now - parse_duration(text)
    except ValueError:
        raise InvalidSpec("since", f"cannot read {text!r}: write 24h, 7d or 30d") from None


def ledger(store: Store, *, now: datetime, since: datetime | None = None) -> LedgerData:
    return build(store, now=now, cuts=[since] if since is not None else [])


def report(data: LedgerData, principal: Principal, *, by: Sequence[str] = (),
           since: datetime | None = None) -> Report:  # fmt: skip
    return build_report(visible(data.ledger.lines, principal), usage=data.usage, now=data.now, by=by, since=since)


class LedgerCache:
    """One ledger build shared by the live pages for ``ttl``.

    Fleet and job pages poll every few seconds; rebuilding the whole ledger for
    every poll of every viewer costs O(history) each time. They read this cache
    (at most ``ttl`` old, by the controller's clock); the Costs page and its
    downloads always build afresh, so they match ``spotfleet cost report``.
    """

    def __init__(self, store: Store, clock: Clock, *, ttl: timedelta = timedelta(seconds=5)) -> None:
        self.store, self.clock, self.ttl = store, clock, ttl
        self._data: LedgerData | None = None
        self._lock = threading.Lock()

    def get(self) -> LedgerData:
        with self._lock:
            now = self.clock.now()
            if self._data is None or not timedelta(0) <= now - self._data.now < self.ttl:
                self._data = ledger(self.store, now=now)
            return self._data


@dataclass(slots=True)
class CostView:
    by: str
    since: str
    totals: dict[str, Any]
    report: Report
    chart: dict[str, Any]
    instances: int
    jobs: int


def cost_view(store: Store, principal: Principal, *, now: datetime, by: str = "tenant", since: str = "") -> CostView:
    if by not in GROUPINGS:
        raise InvalidSpec("by", f"group by {' or '.join(GROUPINGS)}, not {by!r}")
    start = parse_since(since, now=now)
    data = ledger(store, now=now, since=start)
    grouped = report(data, principal, by=[by], since=start)
    daily = report(data, principal, by=["day", by], since=start)
    per_day = report(data, principal, by=["day"], since=start)
    return CostView(by=by, since=since, totals=grouped.totals.figures(), report=grouped,
                    chart=daily_chart(daily, per_day, by=by), instances=grouped.instances, jobs=grouped.jobs)  # fmt: skip


def daily_chart(daily: Report, per_day: Report, *, by: str) -> dict[str, Any]:
    """Chart.js data: one stacked series per group, the on-demand line per day."""
    days = [keys[0] for keys, _ in per_day.rows]
    groups = sorted({keys[1] for keys, _ in daily.rows})
    cost = {(k[0], k[1]): s.figures()["cost"] for k, s in daily.rows}
    return {
        "labels": days,
        "stacks": [{"label": g, "values": [cost.get((d, g), 0.0) for d in days]} for g in groups],
        "on_demand": [s.figures()["on_demand_equivalent"] for _, s in per_day.rows],
        "by": by,
    }


def report_csv(report: Report) -> str:
    """What ``spotfleet cost report [--by KEY] --format csv`` prints."""
    rows = (
        [report.row_dict(k, s) for k, s in report.rows]
        if report.by
        else [{"scope": "total", **report.totals.figures()}]
    )
    return _csv(rows)


def focus_csv(report: Report) -> str:
    """What ``spotfleet cost report --format focus`` prints (FinOps FOCUS rows)."""
    from spotfleet.ledger import focus

    return _csv(focus.rows(report.lines), columns=focus.COLUMNS)


def _csv(rows: list[dict[str, Any]], *, columns: list[str] | None = None) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns or (list(rows[0]) if rows else ["scope"]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
