"""A requeued job's zone choice prices moving its checkpoint (``selection.resume_egress_per_hour``):
the controller stamps where each checkpoint was written (``Checkpoint.provider``/``region``), and
resuming it in another region or cloud pays its size × the egress rate, spread over the run the
move buys (the work left, or the spot pool's expected lifetime when shorter)."""

from __future__ import annotations

from datetime import timedelta

from spotfleet.model.job import Checkpoint, Job
from spotfleet.model.offering import Market
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.selection import economics_of, resume_egress_per_hour
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import T0, job, launches, offering, snapshot

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
