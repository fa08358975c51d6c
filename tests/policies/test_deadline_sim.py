"""The deadline rules end to end: the real controller step and spotfleet policy on tiny traces.

One zone, half-hour ticks, spot at $1/h and on-demand at $3/h; a 6 h job due in
8 h (2 h of slack) with a 0.2 h restart. The outage is long enough that the
policy pays on-demand for it (longer than the slack) and short enough that spot comes back
with the slack to return — the way back the earlier policy lacked.
"""

from __future__ import annotations

from datetime import timedelta

from spotfleet.model.offering import Market
from spotfleet.sim.scenario import run_single_job
from spotfleet.sim.traces import build_trace_set
from tests.sim.helpers import trace_file

OUTAGE = [1, 0, 0, 0, 0, 0] + [1] * 20  # spot, 2.5 h without, then spot to the end


def _run(available: list[int], *, checkpoint: timedelta | None = timedelta(minutes=30)) -> object:
    traces = build_trace_set([("us-east-1a", trace_file("us-east-1a", available, spot=1.0, on_demand=3.0))])
    return run_single_job(traces, "spotfleet", work_hours=6, deadline_hours=8, start_tick=0, restart_hours=0.2,
                          checkpoint_interval=checkpoint)  # fmt: skip


def test_a_deadline_job_comes_back_to_spot_after_an_on_demand_detour() -> None:
    run = _run(OUTAGE)
    assert not run.missed  # type: ignore[attr-defined]
    bills = sorted(run.sim.bills, key=lambda b: b.launched_at)  # type: ignore[attr-defined]
    markets = [b.market for b in bills]
    assert markets[0] is Market.SPOT
    first_od = markets.index(Market.ON_DEMAND)
    assert Market.SPOT in markets[first_od + 1 :]  # back to spot once it returned
    od_hours = sum((b.ended_at - b.launched_at).total_seconds() for b in bills if b.market is Market.ON_DEMAND) / 3600
    # only the outage on on-demand (2.5 h, plus its restart: slack 2 h cannot wait it out), never the
    # rest of the job (5 h more)
    assert od_hours < 2.5 + 0.2


def test_planned_moves_do_not_loop_without_a_periodic_checkpoint() -> None:
    # the job only checkpoints when asked (a notice or a planned move): each move must be one drain,
    # not a drain/re-bind loop onto a replacement bought as if a reclaim were coming
    run = _run(OUTAGE, checkpoint=None)
    assert not run.missed  # type: ignore[attr-defined]
    (job,) = run.sim.jobs  # type: ignore[attr-defined]
    assert job.starts <= 4  # spot, on-demand, back to spot (+ at most one reclaim's restart)
