"""Explain: structured reasons, and the CLI rendering them."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from spotfleet.cli.explain import render
from spotfleet.cli.main import app
from spotfleet.errors import NotFound
from spotfleet.model.job import Checkpoint
from spotfleet.model.offering import Market
from spotfleet.model.snapshot import Budget
from spotfleet.policies.explain import explain_job

from .builders import instance, job, offering, running, snapshot

OFFERS = [
    offering("g5.xlarge", "A10G", 1, 1.00, gpu_memory_gib=24),
    offering("g5.xlarge", "A10G", 1, 0.40, market=Market.SPOT, on_demand=1.0, gpu_memory_gib=24),
    offering("p5.48xlarge", "H100", 8, 98.0),
    offering("g4dn.xlarge", "T4", 1, 0.50, gpu_memory_gib=16),
]


def test_pending_job_blocked_by_budget_says_so_with_ranked_offerings() -> None:
    j = job("j", priority="critical", resources={"gpu_memory_gib": 20})
    snap = snapshot(jobs=[j], offerings=OFFERS, budgets=(Budget(0.5),))
    e = explain_job(snap, "j")
    assert e.state == "pending" and e.plan_status == "blocked" and e.plan_code == "budget"
    assert "budget" in e.summary
    assert e.markets == ("on_demand",)
    assert [r.instance_type for r in e.top] == ["g5.xlarge", "p5.48xlarge"]
    assert e.top[0].cost_per_work <= e.top[1].cost_per_work
    reasons = {g.reason: g.count for g in e.rejected}
    assert reasons["GiB per GPU < 20 GiB needed"] == 1  # the offering's own 16 GiB elided for grouping
    assert any(r.startswith("market spot not allowed") for r in reasons)
    assert e.compatible + sum(g.count for g in e.rejected) == len(OFFERS)
    json.dumps(e.to_dict())  # serialisable as the API serves it


def test_running_job_shows_where_it_is() -> None:
    inst = instance("i1", OFFERS[0])
    e = explain_job(snapshot(jobs=[running("r", inst, (0,))], instances=[inst], offerings=OFFERS), "r")
    assert e.summary.startswith("running on i1 (g5.xlarge on_demand")
    assert [p.instance_id for p in e.placement] == ["i1"]


def test_unknown_job_is_not_found() -> None:
    with pytest.raises(NotFound):
        explain_job(snapshot(offerings=OFFERS), "nope")


def test_cli_explains_a_spec_offline(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: tiny\ncommand: python t.py\nresources: {gpus: 1, gpu_types: [T4]}\nregions: [us-east-1]\n")
    runner = CliRunner()
    result = runner.invoke(app, ["explain", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    assert "best offerings" in result.output and "rejected offerings" in result.output
    result = runner.invoke(app, ["explain", "--spec", str(spec), "--json"])
    data = json.loads(result.output)
    assert data["top"] and all(r["gpu"] == "T4" and r["region"] == "us-east-1" for r in data["top"])
    assert runner.invoke(app, ["explain"]).exit_code == 2


def test_rejections_group_by_constraint() -> None:
    from spotfleet.policies.explain import constraint_of

    assert constraint_of("region us-west-2 not in allowed regions ['us-east-1']") == (
        "region * not in allowed regions ['us-east-1']"
    )
    assert constraint_of("GPU RTX PRO Server 6000 not in ['H100']") == "GPU * not in ['H100']"
    assert constraint_of("1 GPUs < 8 needed per node") == "GPUs < 8 needed per node"
    assert constraint_of("$3.00/h > max price $2.50/h") == "price > max price $2.50/h"


def test_explain_says_when_the_controller_runs_another_policy(tmp_path: Path) -> None:
    """Under ``policy: simple`` the ranking shown is spotfleet's: the explanation says so."""
    from spotfleet.policies.simple import SimplePolicy
    from spotfleet.store import Store
    from tests.controller.harness import make_harness

    store = Store(f"sqlite:///{tmp_path / 'explain.db'}")
    store.migrate()
    h = make_harness(store, tmp_path)
    assert isinstance(h.controller.policy, SimplePolicy)
    job = h.submit(name="train", resources={"gpus": 1})
    out = h.controller.explain(job.id)
    assert out["policy"] == "spotfleet"
    assert "runs the 'simple' policy" in out["policy_note"]


def test_a_deadline_job_shows_its_spot_market_and_slack_outlook() -> None:
    from datetime import timedelta

    from spotfleet.model.snapshot import PoolAvailability, spot_market_key

    from .builders import T0

    spot = offering("g5.xlarge", "A10G", 1, 0.4, market=Market.SPOT, on_demand=1.2)
    od = offering("g5.xlarge", "A10G", 1, 1.2)
    d = job("d", deadline=(T0 + timedelta(hours=12)).isoformat(), expected_duration="10h", resources={"gpus": 1})
    seen = PoolAvailability(spot_market_key(spot), up_hours=17.1, down_hours=3.85, ended_runs=4, up_now=True)
    snap = snapshot(jobs=[d], offerings=[spot, od])
    snap.availability = (seen,)
    out = explain_job(snap, "d").to_dict()["extra"]["deadline"]
    market = out["spot_market"]
    assert market["availability"] == 0.8 and market["mean_up_h"] == 4.0 and market["mean_down_h"] == 1.0
    assert market["cheapest_spot_per_h"] == 0.4 and market["on_demand_per_h"] == 1.2
    slack = out["slack"]
    assert slack["spendable_h"] < 2.0 and 0 < slack["p_runs_out"] <= 1 and "P(runs out)" in slack["summary"]
    assert out["reclaim_loss"] == {"checkpoint_s": None, "notice_s": {"aws": 120.0}, "fits_notice": True,
                                   "reserved_work_h": 0.0,
                                   "summary": "checkpoint.duration not given: assumed to fit the notice"}  # fmt: skip


def test_explain_says_when_a_checkpoint_outlasts_the_notice() -> None:
    from datetime import timedelta

    from .builders import T0

    spot = offering("a3-highgpu-8g", "H100", 8, 25.0, market=Market.SPOT, on_demand=88.0, provider="gcp")
    od = offering("a3-highgpu-8g", "H100", 8, 88.0, provider="gcp")
    d = job("d", deadline=(T0 + timedelta(hours=12)).isoformat(), expected_duration="10h",
            resources={"gpus": 8}, checkpoint={"interval": "30m", "duration": "60s"})  # fmt: skip
    loss = explain_job(snapshot(jobs=[d], offerings=[spot, od]), "d").to_dict()["extra"]["deadline"]["reclaim_loss"]
    assert loss["fits_notice"] is False and loss["reserved_work_h"] == 0.5
    assert loss["summary"] == "checkpoint takes 60 s; notice gcp 30 s"
    assert "at_risk_h" not in loss, "a queued job has nothing unsaved"

    # running on that spot, 5 h done (a step a second), its last checkpoint 12 min before
    inst = instance("i", spot)
    r = running("r", inst, tuple(range(8)), deadline=(T0 + timedelta(hours=12)).isoformat(),
                expected_duration="10h", resources={"gpus": 8}, checkpoint={"interval": "30m", "duration": "60s"},
                progress={"step": 18000, "fraction": 0.5})  # fmt: skip
    r.checkpoint = Checkpoint("gs://c/17280", 17280, T0, r.attempt)
    snap = snapshot(jobs=[r], instances=[inst], offerings=[spot, od])
    loss = explain_job(snap, "r").to_dict()["extra"]["deadline"]["reclaim_loss"]
    assert loss["at_risk_h"] == 0.2 and loss["reserved_work_h"] == 0.5
    printed = StringIO()
    render(explain_job(snap, "r").to_dict(), Console(file=printed, width=200))
    assert (
        "a reclaim costs a restart and up to 0.50 h of work, held in reserve; 0.20 h unsaved now" in printed.getvalue()
    )
    r.progress = {"fraction": 0.5}  # no step: the reports cannot say
    assert explain_job(snap, "r").to_dict()["extra"]["deadline"]["reclaim_loss"]["at_risk_h"] is None


def test_cli_explain_prints_a_deadline_jobs_market_and_slack(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: due\ncommand: python t.py\nresources: {gpus: 1, gpu_types: [A10G]}\n"
                    "deadline: '2099-01-01T00:00:00Z'\nexpected_duration: 10h\n")  # fmt: skip
    result = CliRunner().invoke(app, ["explain", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    assert "spot market: available" in result.output and "deadline slack:" in result.output
    assert "a reclaim costs a restart (checkpoint.duration not given" in result.output
