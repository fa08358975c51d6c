"""Selection: expected cost per unit of useful work, with hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from spotfleet.model.offering import Market
from spotfleet.model.snapshot import PoolAvailability
from spotfleet.policies import throughput
from spotfleet.policies.forecast import Forecast
from spotfleet.policies.knobs import Knobs
from spotfleet.policies.market import EITHER, ON_DEMAND_ONLY, SPOT_ONLY
from spotfleet.policies.selection import OfferingIndex, economics_of, egress_cost, pool_reclaim_rate, rank
from spotfleet.policies.shape import shape_of
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import binds, job, launches, offering, snapshot

# Table figures by hand: sqrt(TFLOP/s ratio × bandwidth ratio) to the A100-80GB (312, 2039).
H100 = math.sqrt(989 / 312 * 3350 / 2039)  # 2.2821
A100_40 = math.sqrt(1555 / 2039)  # 0.8733


def test_table_is_geometric_mean_of_compute_and_bandwidth() -> None:
    assert throughput.table_throughput("H100") == pytest.approx(H100)
    assert throughput.table_throughput("a100") == pytest.approx(A100_40)
    assert throughput.table_throughput("A100-80GB") == pytest.approx(1.0)
    assert throughput.table_throughput("NoSuchGPU") == throughput.UNKNOWN_GPU_THROUGHPUT


def test_cheaper_per_work_h100_beats_cheaper_per_hour_a100() -> None:
    a100 = offering("a2-highgpu-1g", "A100", 1, 3.00, gpu_memory_gib=40)
    h100 = offering("a3-highgpu-1g", "H100", 1, 6.00)
    snap = snapshot(jobs=[job("j1", priority="critical")], offerings=[a100, h100])
    # A100: 3.00 / 0.8733 = $3.435 per unit; H100: 6.00 / 2.2821 = $2.629 per unit
    (launch,) = launches(SpotfleetPolicy().decide(snap))
    assert launch.offering is h100

    j = snap.jobs["j1"]
    f = Forecast()
    ranking = rank(snap.offerings, shape=shape_of(j.spec, f), econ=economics_of(j, f, Knobs()),
                   markets=ON_DEMAND_ONLY, forecast=f)  # fmt: skip
    assert [s.offering.gpu for s in ranking.scored] == ["H100", "A100"]
    assert ranking.scored[0].cost_per_work == pytest.approx(6.00 / H100)
    assert ranking.scored[1].cost_per_work == pytest.approx(3.00 / A100_40)


def test_a100_wins_when_h100_costs_more_per_unit_of_work() -> None:
    a100 = offering("a2-highgpu-1g", "A100", 1, 3.00, gpu_memory_gib=40)
    h100 = offering("a3-highgpu-1g", "H100", 1, 8.00)  # 8.00 / 2.2821 = 3.506 > 3.435
    snap = snapshot(jobs=[job("j1", priority="critical")], offerings=[a100, h100])
    (launch,) = launches(SpotfleetPolicy().decide(snap))
    assert launch.offering is a100


def test_overhead_from_hazard_checkpoint_interval_and_restart_delay() -> None:
    spot = offering("g5.xlarge", "A10G", 1, 0.40, market=Market.SPOT, on_demand=1.0)
    j = job("j1", checkpoint={"interval": "30m"}, expected_duration="4h")
    f = Forecast()
    econ = economics_of(j, f, Knobs())
    # lost work = interval / 2 = 0.25 h; restart 10 min; AWS prior hazard 0.468/h
    assert econ.lost_work_h == pytest.approx(0.25)
    ranking = rank([spot], shape=shape_of(j.spec, f), econ=econ, markets=SPOT_ONLY, forecast=f)
    s = ranking.scored[0]
    assert s.hazard == pytest.approx(0.468)
    assert s.overhead == pytest.approx(0.468 * (0.25 + 10 / 60))
    assert s.cost_per_work == pytest.approx(0.40 * (1 + 0.468 * (0.25 + 10 / 60)) / throughput.table_throughput("A10G"))


def test_no_checkpoint_loses_half_the_job_per_interruption() -> None:
    j = job("j1", expected_duration="6h")
    assert economics_of(j, Forecast(), Knobs()).lost_work_h == pytest.approx(3.0)


def test_spot_loses_to_on_demand_when_interruptions_cost_more_than_the_discount() -> None:
    # a 12 h job without checkpoints: overhead = 0.468 × (6 + 1/6) = 2.886 → spot at 40 % of
    # on-demand costs 0.4 × 3.886 = 1.55× on-demand per unit of work
    od = offering("g5.xlarge", "A10G", 1, 1.00)
    spot = offering("g5.xlarge", "A10G", 1, 0.40, market=Market.SPOT, on_demand=1.0)
    snap = snapshot(jobs=[job("j1", expected_duration="12h")], offerings=[spot, od])
    (launch,) = launches(SpotfleetPolicy().decide(snap))
    assert launch.offering is od
    # with 10-minute checkpoints the overhead is 0.468 × (1/12 + 1/6) = 0.117 → spot wins
    snap = snapshot(jobs=[job("j1", expected_duration="12h", checkpoint={"interval": "10m"})], offerings=[spot, od])
    (launch,) = launches(SpotfleetPolicy().decide(snap))
    assert launch.offering is spot


def test_hard_constraints_are_reported_as_rejections() -> None:
    ok = offering("p4d.24xlarge", "A100", 8, 30.0, gpu_memory_gib=40, nvlink=True)
    small = offering("g5.xlarge", "A10G", 1, 1.0, gpu_memory_gib=24)
    elsewhere = offering("p4d.24xlarge", "A100", 8, 20.0, gpu_memory_gib=40, nvlink=True, region="eu-west-1",
                         zone="euw1-az1")  # fmt: skip
    no_link = offering("g5.48xlarge", "A10G", 8, 16.0, gpu_memory_gib=24)
    spot = offering("p4d.24xlarge", "A100", 8, 9.0, gpu_memory_gib=40, nvlink=True, market=Market.SPOT)
    j = job("j1", resources={"gpus": 8, "nvlink": True, "gpu_memory_gib": 32}, regions=["us-east-1"])
    f = Forecast()
    ranking = rank([ok, small, elsewhere, no_link, spot], shape=shape_of(j.spec, f), econ=economics_of(j, f, Knobs()),
                   markets=ON_DEMAND_ONLY, forecast=f, market_reason="critical jobs run on on-demand")  # fmt: skip
    assert [s.offering for s in ranking.scored] == [ok]
    reasons = {o.instance_type + ":" + o.region + ":" + o.market.value: r for o, r in ranking.rejected}
    assert reasons["g5.xlarge:us-east-1:on_demand"] == "1 GPUs < 8 needed per node"
    assert "region eu-west-1 not in allowed regions" in reasons["p4d.24xlarge:eu-west-1:on_demand"]
    assert reasons["g5.48xlarge:us-east-1:on_demand"] == "24 GiB per GPU < 32 GiB needed"
    assert reasons["p4d.24xlarge:us-east-1:spot"].startswith("market spot not allowed: critical")


def test_max_price_and_mig_capability_are_hard_constraints() -> None:
    t4 = offering("g4dn.xlarge", "T4", 1, 0.5, gpu_memory_gib=16)
    a100 = offering("a2-highgpu-1g", "A100", 1, 3.0, gpu_memory_gib=40)
    f = Forecast()
    j = job("j1", resources={"mig": "1g.5gb"}, max_price_per_hour=2.5)
    ranking = rank([t4, a100], shape=shape_of(j.spec, f), econ=economics_of(j, f, Knobs()), markets=EITHER, forecast=f)
    reasons = dict((o.gpu, r) for o, r in ranking.rejected)
    assert reasons["T4"] == "GPU T4 does not support MIG (needs A100/H100/H200)"
    assert reasons["A100"] == "$3.00/h > max price $2.50/h"


def test_group_of_small_jobs_shares_a_big_box_when_cheaper_per_gpu() -> None:
    one = offering("g5.xlarge", "A10G", 1, 1.20, gpu_memory_gib=24)
    eight = offering("g5.48xlarge", "A10G", 8, 8.00, gpu_memory_gib=24)  # $1.00 per GPU
    # a lone job: 1.20 (one GPU) < 8.00 (pays the whole box)
    snap = snapshot(jobs=[job("a", priority="critical")], offerings=[one, eight])
    assert [lc.offering for lc in launches(SpotfleetPolicy().decide(snap))] == [one]
    # eight of them: 8 × 1.20 > 8.00 → one 8-GPU box holds all eight
    snap = snapshot(jobs=[job(f"j{i}", priority="critical") for i in range(8)], offerings=[one, eight])
    cmds = SpotfleetPolicy().decide(snap)
    assert [lc.offering for lc in launches(cmds)] == [eight]
    placed = binds(cmds)
    assert sorted(b.bindings[0].gpu_indices[0] for b in placed.values()) == list(range(8))


def test_data_locality_adds_egress_cost() -> None:
    near = offering("g5.xlarge", "A10G", 1, 1.00, region="us-east-1", zone="use1-az1")
    far = offering("g5.xlarge", "A10G", 1, 0.90, region="us-west-2", zone="usw2-az1")
    # 500 GiB × $0.02/GiB = $10 over a 2 h job = $5/h → near wins despite the higher price
    j = job("j1", priority="critical", expected_duration="2h", dataset={"region": "us-east-1", "size_gib": 500})
    snap = snapshot(jobs=[j], offerings=[far, near])
    (launch,) = launches(SpotfleetPolicy().decide(snap))
    assert launch.offering is near
    f = Forecast()
    index = OfferingIndex([near, far], forecast=f)
    table = index.ranked(shape_of(j.spec, f), ON_DEMAND_ONLY, economics_of(j, f, Knobs()))
    speed = throughput.table_throughput("A10G")
    assert [s.offering for s in table] == [near, far]
    assert table[1].egress_per_hour == pytest.approx(5.0)
    assert table[1].cost_per_work == pytest.approx((0.90 + 5.0) / speed)


def test_dataset_in_another_cloud_pays_internet_egress() -> None:
    """A dataset region that the offering's cloud does not have is another cloud's:
    moving it pays internet egress, not the inter-region rate."""
    aws_near = offering("g5.xlarge", "A10G", 1, 1.00, region="us-east-1", zone="use1-az1")
    aws_far = offering("g5.xlarge", "A10G", 1, 1.00, region="us-west-2", zone="usw2-az1")
    gcp = offering("g2-standard-4", "A10G", 1, 1.00, provider="gcp", region="us-central1", zone="us-central1-a")
    knobs = Knobs()
    f = Forecast()
    index = OfferingIndex([aws_near, aws_far, gcp], forecast=f)
    econ = economics_of(job("j1", expected_duration="1h", dataset={"region": "us-east-1", "size_gib": 100}), f, knobs)
    assert egress_cost(econ, aws_near, index=index, knobs=knobs) == 0.0
    assert egress_cost(econ, aws_far, index=index, knobs=knobs) == pytest.approx(
        100 * knobs.egress_inter_region_per_gib
    )
    assert egress_cost(econ, gcp, index=index, knobs=knobs) == pytest.approx(100 * knobs.egress_internet_per_gib)


def test_throughput_override_and_learned_figures() -> None:
    # spec.throughput scales the table (its unit), learned figures replace it per GPU
    assert throughput.scaled_throughput("H100", {}) == pytest.approx(H100)
    learned = {"A100": 100.0}  # samples per GPU-hour observed on A100-40GB
    assert throughput.scaled_throughput("A100", learned) == 100.0
    assert throughput.scaled_throughput("H100", learned) == pytest.approx(100.0 / A100_40 * H100)
    j = job("j1", throughput=50.0)
    econ = economics_of(j, Forecast(), Knobs())
    assert econ.throughput("H100") == pytest.approx(50.0 * H100)


def test_unavailable_pool_is_skipped_and_next_best_is_bought() -> None:
    best = offering("a3-highgpu-1g", "H100", 1, 6.0)
    second = offering("a3-highgpu-1g", "H100", 1, 6.5, zone="use1-az2")
    from datetime import timedelta

    from .builders import T0

    snap = snapshot(jobs=[job("j1", priority="critical")], offerings=[best, second],
                    unavailable={best.key: T0 + timedelta(minutes=3)})  # fmt: skip
    (launch,) = launches(SpotfleetPolicy().decide(snap))
    assert launch.offering is second
    # an expired entry no longer hides the pool
    snap = snapshot(jobs=[job("j1", priority="critical")], offerings=[best, second],
                    unavailable={best.key: T0 - timedelta(seconds=1)})  # fmt: skip
    (launch,) = launches(SpotfleetPolicy().decide(snap))
    assert launch.offering is best
    assert launch.alternatives == (second,)


def test_a_cheap_pool_that_flaps_loses_to_a_steady_one() -> None:
    """The ranking prices a spot pool by its blips, not only by our own reclaims
    there: a pool whose runs last minutes is worse than a steadier one at 12 %
    more, though neither has reclaimed one of our instances yet."""
    flappy = offering("g5.xlarge", "A10G", 1, 0.80, market=Market.SPOT, on_demand=3.0, zone="use1-az1")
    steady = offering("g5.xlarge", "A10G", 1, 0.90, market=Market.SPOT, on_demand=3.0, zone="use1-az2")
    od = offering("g5.xlarge", "A10G", 1, 3.00)
    j = job("j1", expected_duration="12h", checkpoint={"interval": "10m"})
    # ten runs of 18 min, the pool just back up: the rest of its run is (2.9 + 10 × 0.3) / 11 h
    seen_flappy = PoolAvailability(flappy.key, up_hours=3.0, down_hours=1.0, ended_runs=10,
                                   recent_runs_h=(0.3,) * 10, up_for_h=0.0)  # fmt: skip
    seen_steady = PoolAvailability(steady.key, up_hours=45.0, down_hours=1.0, ended_runs=2,
                                   recent_runs_h=(20.0, 20.0), up_for_h=5.0)  # fmt: skip
    blind = snapshot(jobs=[j], offerings=[flappy, steady, od])
    (launch,) = launches(SpotfleetPolicy().decide(blind))
    assert launch.offering is flappy  # nothing observed: both carry the AWS prior, the cheaper wins
    seen = snapshot(jobs=[j], offerings=[flappy, steady, od])
    seen.availability = (seen_flappy, seen_steady)
    (launch,) = launches(SpotfleetPolicy().decide(seen))
    assert launch.offering is steady
    f = Forecast.from_history(availability=seen.availability)
    assert pool_reclaim_rate(f, flappy) == pytest.approx(11 / (2.9 + 3.0))
    assert pool_reclaim_rate(f, steady) == pytest.approx(0.468)  # its runs outlast the prior's 1/0.468 h
    assert pool_reclaim_rate(f, od) == 0.0
