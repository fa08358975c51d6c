"""A requeued job's zone choice prices moving its checkpoint (``selection.resume_egress_per_hour``):
the controller stamps where each checkpoint was written (``Checkpoint.provider``/``region``), and
resuming it in another region or cloud pays its size × the egress rate, spread over the run the
move buys (the work left, or the spot pool's expected lifetime when shorter)."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from spotfleet.catalog import load_catalog
from spotfleet.model.job import Checkpoint, Job
from spotfleet.model.offering import Market
from spotfleet.model.spec import JobSpec
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.selection import OfferingIndex, economics_of, rank, resume_egress_per_hour
from spotfleet.policies.shape import shape_of
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, binds, job, launches, offering, snapshot

EAST = offering("p3.2xlarge", "V100", 1, 0.95, market=Market.SPOT, on_demand=3.06, region="us-east-1", zone="use1-az1")
WEST = offering("p3.2xlarge", "V100", 1, 0.90, market=Market.SPOT, on_demand=3.06, region="us-west-2", zone="usw2-az1")
OD = offering("p3.2xlarge", "V100", 1, 3.06, region="us-east-1", zone="use1-az1")


def _requeued(size_gib: float, where: tuple[str, str] | None) -> Job:
    j = job("d", deadline=(T0 + timedelta(hours=30)).isoformat(), expected_duration="20h",
            checkpoint={"interval": "30m", "size_gib": size_gib}, progress={"fraction": 0.5})  # fmt: skip
    if where is not None:
        j.checkpoint = Checkpoint("s3://ckpt", 10, T0, 1, *where)
    return j


def _launched_region(size_gib: float, where: tuple[str, str] | None) -> str:
    (launch,) = launches(SpotfleetPolicy(Knobs()).decide(snapshot(jobs=[_requeued(size_gib, where)],
                                                                  offerings=[EAST, WEST, OD])))  # fmt: skip
    return launch.offering.region


def test_a_large_checkpoint_resumes_where_it_was_written_over_a_slightly_cheaper_region() -> None:
    # 50 GiB × $0.02 = $1 per move, over a spot run of ~2 h (AWS prior hazard): ~$0.47/h against a $0.05/h gap
    assert _launched_region(50.0, ("aws", "us-east-1")) == "us-east-1"
    # 1 GiB: ~$0.01/h, the cheaper region wins; so it does when the checkpoint's place is unknown
    assert _launched_region(1.0, ("aws", "us-east-1")) == "us-west-2"
    assert _launched_region(50.0, None) == "us-west-2"


def test_resume_egress_is_free_in_place_and_spread_over_the_run_the_move_buys() -> None:
    econ = economics_of(_requeued(50.0, ("aws", "us-east-1")), Forecast(), Knobs())
    assert econ.resume_from == ("aws", "us-east-1") and econ.resume_work_h == 10.0
    assert resume_egress_per_hour(econ, EAST, 0.5, Knobs()) == 0.0
    assert resume_egress_per_hour(econ, WEST, 0.5, Knobs()) == 50 * 0.02 / 2.0  # a 2 h spot run
    assert resume_egress_per_hour(econ, WEST, 0.0, Knobs()) == 50 * 0.02 / 10.0  # on-demand: the work left
    gcp = offering("a2-highgpu-1g", "A100", 1, 1.0, provider="gcp", region="us-central1", zone="us-central1-a")
    assert resume_egress_per_hour(econ, gcp, 0.0, Knobs()) == 50 * 0.09 / 10.0  # leaving the cloud: internet rate


def _located(job_id: str, where: tuple[str, str], spec: JobSpec | None = None) -> Job:
    j = job(job_id, expected_duration="20h", checkpoint={"interval": "30m", "size_gib": 50.0},
            progress={"fraction": 0.5})  # fmt: skip
    if spec is not None:
        j.spec = spec
    j.checkpoint = Checkpoint("s3://ckpt", 10, T0, 1, *where)
    return j


def test_jobs_of_one_spec_with_checkpoints_in_different_regions_each_resume_at_home() -> None:
    # one spec object for both (the plan groups jobs by spec): each still buys by its own checkpoint
    east = _located("e", ("aws", "us-east-1"))
    west = _located("w", ("aws", "us-west-2"), spec=east.spec)
    cmds = SpotfleetPolicy(Knobs()).decide(snapshot(jobs=[east, west], offerings=[EAST, WEST, OD]))
    by_job = {job_id: b.bindings[0].instance_id for job_id, b in binds(cmds).items()}
    region_of = {launch.instance_id: launch.offering.region for launch in launches(cmds)}
    assert {job_id: region_of[i] for job_id, i in by_job.items()} == {"e": "us-east-1", "w": "us-west-2"}


@pytest.mark.parametrize("source", [("aws", "us-east-1"), ("aws", "us-west-2"), ("gcp", "us-central1")])
@pytest.mark.parametrize("group", [1, 4])
def test_a_located_checkpoints_ranking_is_the_full_scorers_order(source: tuple[str, str], group: int) -> None:
    # RankTable admits classes lazily (a resume only adds cost): on the whole bundled catalog its
    # rows must be the offerings rank() scores one by one, in the same cost order
    catalog = list(load_catalog())
    j = _located("r", source)
    forecast, knobs = Forecast(), Knobs()
    econ = economics_of(j, forecast, knobs)
    shape = shape_of(j.spec, forecast)
    markets = (Market.SPOT, Market.ON_DEMAND)
    index = OfferingIndex(catalog, forecast=forecast, knobs=knobs)
    table = index.ranked(shape, markets, econ, group=group)
    full = rank(catalog, shape=shape, econ=econ, markets=markets, forecast=forecast, group=group, knobs=knobs)
    rows = list(table)
    assert len(rows) == len(full.scored) > 100
    assert table[-1] == rows[-1] and table[1:3] == rows[1:3]
    assert {r.offering.key for r in rows} == {s.offering.key for s in full.scored}
    costs = [r.cost_per_work for r in rows]
    assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(costs))
    assert costs[0] == pytest.approx(full.scored[0].cost_per_work)
    # the move is priced: the best row is in the checkpoint's region or paid for leaving it
    assert any(r.egress_per_hour > 0 for r in rows) and any(r.egress_per_hour == 0 for r in rows)
    # what a launch's alternatives read without scoring a row: the scored row's offering and fill
    assert [table.offering_fill(i) for i in range(len(rows))] == [(r.offering, r.fill) for r in rows]
