"""Forecasts: hazard priors from the traces, posteriors, durations, memory, throughput."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotfleet.model.offering import Market
from spotfleet.model.snapshot import PoolAvailability, PoolExposure, RunRecord
from spotfleet.policies.forecast import PRIOR_UP_RUN_H, Forecast, SpotSupply, remaining_life
from spotfleet.policies.spotfleet import SpotfleetPolicy

from .builders import job, launches, offering, snapshot

SPOT = offering("p3.2xlarge", "V100", 1, 0.9, market=Market.SPOT, on_demand=3.06, gpu_memory_gib=16)


def test_hazard_prior_by_provider_and_zero_on_demand() -> None:
    f = Forecast()
    assert f.hazard(SPOT) == pytest.approx(0.468)  # 202 preemptions / 431.2 h (aws-v100-preemption-2023-04)
    gcp = offering("a3-highgpu-8g", "H100", 8, 15.0, market=Market.SPOT, provider="gcp", region="us-central1",
                   zone="us-central1-a")  # fmt: skip
    assert f.hazard(gcp) == pytest.approx(0.275)
    assert f.hazard(offering(provider="local", market=Market.SPOT)) == pytest.approx(0.310)
    assert f.hazard(offering("p3.2xlarge", "V100", 1, 3.06)) == 0.0


def test_hazard_posterior_moves_from_prior_toward_observations() -> None:
    f = Forecast.from_history(exposure=[PoolExposure(SPOT.key, hours=100.0, interruptions=10)])
    # (0.468 × 24 + 10) / (24 + 100)
    assert f.hazard(SPOT) == pytest.approx((0.468 * 24 + 10) / 124)
    calm = Forecast.from_history(exposure=[PoolExposure(SPOT.key, hours=2000.0, interruptions=0)])
    assert calm.hazard(SPOT) == pytest.approx(0.468 * 24 / 2024)


def test_one_hazard_prior_for_every_pool_when_the_knob_sets_it() -> None:
    # the held-out protocol's prior (Knobs.hazard_prior_per_h): no cloud's own, observed pools still update it
    f = Forecast.from_history(exposure=[PoolExposure(SPOT.key, hours=24.0, interruptions=0)], prior_per_hour=2.0)
    assert f.hazard(SPOT) == pytest.approx(2.0 * 24 / 48)
    gcp = offering("a3-highgpu-8g", "H100", 8, 15.0, market=Market.SPOT, provider="gcp", region="us-central1",
                   zone="us-central1-a")  # fmt: skip
    assert f.hazard(gcp) == 2.0 and f.hazard(offering("p3.2xlarge", "V100", 1, 3.06)) == 0.0


def test_the_policy_reads_its_hazard_prior_from_the_knobs() -> None:
    from spotfleet.sim.scenario import make_policy

    spot, od = SPOT, offering("p3.2xlarge", "V100", 1, 3.06, gpu_memory_gib=16)
    snap = snapshot(jobs=[job("j", resources={"gpus": 1}, expected_duration="10h", checkpoint={"interval": "30m"})],
                    offerings=[spot, od])  # fmt: skip
    # at the default 0.468/h spot's restarts cost less than on-demand's premium; at 20/h they do not
    assert [launch.offering.market for launch in launches(make_policy("spotfleet").decide(snap))] == [Market.SPOT]
    flaky = make_policy("spotfleet", hazard_prior_per_h=20.0)
    assert [launch.offering.market for launch in launches(flaky.decide(snap))] == [Market.ON_DEMAND]


def test_durations_memory_and_throughput_per_family() -> None:
    runs = [
        RunRecord("bert", "A100", 1, 3600, peak_gpu_memory_gib=18.0, work=1000.0),
        RunRecord("bert", "A100", 1, 7200, peak_gpu_memory_gib=20.0, work=2000.0),
        RunRecord("bert", "H100", 2, 1800, work=2000.0),
        RunRecord("bert", "A100", 1, 60, succeeded=False),
    ]
    f = Forecast.from_history(runs)
    assert f.duration_s("bert") == 3600  # median of 1800, 3600, 7200 (the failed run is ignored)
    assert f.memory_requirement_gib("bert") == pytest.approx(22.0)  # 20 GiB peak + 10 %
    assert f.family_throughput("bert") == {"A100": pytest.approx(1000.0), "H100": pytest.approx(2000.0)}
    assert f.duration_s("other") is None and f.memory_requirement_gib("other") is None


def test_forecast_memory_keeps_a_20gb_family_off_16gb_gpus() -> None:
    t4 = offering("g4dn.xlarge", "T4", 1, 0.50, gpu_memory_gib=16)
    l4 = offering("g6.xlarge", "L4", 1, 0.80, gpu_memory_gib=24)
    # without history the T4 is cheaper per unit of work: 0.50/0.181 < 0.80/0.239
    snap = snapshot(jobs=[job("bert", priority="critical")], offerings=[t4, l4])
    assert launches(SpotfleetPolicy().decide(snap))[0].offering is t4
    history = (RunRecord("bert", "L4", 1, 3600, peak_gpu_memory_gib=20.0),)
    snap = snapshot(jobs=[job("bert", priority="critical")], offerings=[t4, l4], runs=history)
    assert launches(SpotfleetPolicy().decide(snap))[0].offering is l4
    # a spec that names its memory wins over the forecast
    snap = snapshot(jobs=[job("bert", priority="critical", resources={"gpu_memory_gib": 8})], offerings=[t4, l4],
                    runs=history)  # fmt: skip
    assert launches(SpotfleetPolicy().decide(snap))[0].offering is t4


def test_learned_throughput_changes_the_choice() -> None:
    a100 = offering("a2-highgpu-1g", "A100", 1, 3.00, gpu_memory_gib=40)
    h100 = offering("a3-highgpu-1g", "H100", 1, 6.00)
    snap = snapshot(jobs=[job("conv", priority="critical")], offerings=[a100, h100])
    assert launches(SpotfleetPolicy().decide(snap))[0].offering is h100  # table: H100 2.6× A100-40
    # this family was observed only 1.5× faster on H100: 6.00/150 > 3.00/100
    history = (RunRecord("conv", "A100", 1, 3600, work=100.0), RunRecord("conv", "H100", 1, 3600, work=150.0))
    snap = snapshot(jobs=[job("conv", priority="critical")], offerings=[a100, h100], runs=history)
    assert launches(SpotfleetPolicy().decide(snap))[0].offering is a100


def test_supply_reads_the_recent_evidence_and_weights_runs() -> None:
    """A pool that flapped long ago and has been steady lately: the recency-weighted
    figures, not the totals, set its mean runs and remaining life."""
    old_flaps = PoolAvailability("k", up_hours=30.0, down_hours=10.0, ended_runs=20, recent_runs_h=(0.5,) * 19 + (20.0,),
                                 up_for_h=1.0)  # fmt: skip
    recent = replace(old_flaps, recent_up_h=20.0, recent_down_h=0.5, recent_ended=1.0,
                     recent_runs_weight=(0.01,) * 19 + (1.0,))  # fmt: skip
    flappy, steady = SpotSupply.observed(old_flaps), SpotSupply.observed(recent)
    assert flappy.mean_up_h == pytest.approx((PRIOR_UP_RUN_H + 30.0) / 21)
    assert steady.mean_up_h == pytest.approx((PRIOR_UP_RUN_H + 20.0) / 2)
    assert steady.availability > flappy.availability
    # the remaining life of a run an hour old: only the 20 h run outlived the hour
    assert flappy.remaining_up_h == steady.remaining_up_h == pytest.approx((PRIOR_UP_RUN_H + 19.0) / 2)
    assert remaining_life((0.5, 20.0), 0.0, (1.0, 0.1)) == pytest.approx((PRIOR_UP_RUN_H + 0.5 + 2.0) / 2.1)
    assert remaining_life((0.5, 20.0), 0.0) == pytest.approx((PRIOR_UP_RUN_H + 20.5) / 3)
