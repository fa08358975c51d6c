"""A real 2-node PyTorch DDP gang on the local provider (torch CPU, gloo).

``examples/train_ddp.py`` runs under torchrun on two local instances with the
rendezvous spotfleet gives each node. One member is reclaimed mid-run (a real
notice on its metadata service); the notice reaches both members (the reclaimed
node's agent directly, the other as the controller's drain order), both ranks
save at the same step, the gang is rebound together and resumes from that step,
and the final loss equals an uninterrupted run's.

Tolerance: none. gloo on CPU sums two ranks' gradients as a + b (exact and
order-free for two operands), the data is a function of (step, rank), the
model's seed is fixed and the checkpoint holds the exact model and optimizer
state, so the resumed run does the same float operations in the same order as
the uninterrupted one and its final loss is bit-for-bit the same.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from spotfleet.config import Config
from spotfleet.model import JobState
from spotfleet.model.events import NoticeKind
from spotfleet.model.spec import parse_spec
from spotfleet.service import Service
from tests.e2e.test_local_e2e import config, services, wait_for  # noqa: F401 - fixtures

# torch's import takes ~10-30 s per process on a shared 2-core machine, and each
# attempt starts 2 launchers + 2 workers (plus the baseline's 3 processes)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
STEPS = 160
ARGS = ["--steps", str(STEPS), "--step-seconds", "0.05", "--checkpoint-every", "1000", "--deadline-margin", "3"]
FINAL = re.compile(r"final loss (\S+)")


def uninterrupted_loss(tmp: Path) -> float:
    """The same two ranks (world 2, gloo) in one torchrun, never interrupted."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "MASTER_", "PET_"))}
    env.update({"NNODES": "1", "NPROC_PER_NODE": "2", "SPOTFLEET_CHECKPOINT_DIR": str(tmp / "baseline")})
    argv = [sys.executable, str(SCRIPT), *[a if a != "0.05" else "0" for a in ARGS]]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    match = FINAL.search(out.stdout)
    assert match, out.stdout
    return float(match.group(1))


def steps_by_attempt(path: Path) -> list[tuple[int, int]]:
    return [(int(s), int(a)) for s, a in (line.split() for line in path.read_text().splitlines() if line.strip())]


def node_file(root: Path, sub: str, name: str) -> Path:
    found = list(root.glob(f"*/work/{sub}/{name}"))
    assert len(found) == 1, f"{sub}/{name}: {found}"
    return found[0]


def at(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def test_a_ddp_gang_checkpoints_together_on_one_members_reclaim_and_ends_as_if_never_interrupted(
    config: Config,  # noqa: F811
    services: list[Service],  # noqa: F811
    tmp_path: Path,
) -> None:
    expected = uninterrupted_loss(tmp_path)
    service = Service(config)
    services.append(service)
    service.start_background()
    spec = parse_spec({
        "name": "ddp", "priority": "opportunistic", "resources": {"gpus": 1, "nodes": 2},
        "command": ["python", str(SCRIPT), *ARGS],
    })  # fmt: skip
    job = service.controller.submit(spec)
    store = service.store
    wait_for("step 40", lambda: (store.get_job(job.id).progress.get("step") or 0) >= 40, timeout=90)
    running = store.get_job(job.id)
    reclaimed = next(b.instance_id for b in running.bindings if b.node_rank == 1)
    other = next(b.instance_id for b in running.bindings if b.node_rank == 0)
    noticed = datetime.now(UTC)
    service.controller.interrupt(reclaimed, kind=NoticeKind.SPOT_INTERRUPTION, notice=timedelta(seconds=20))
    wait_for("done", lambda: store.get_job(job.id).terminal, timeout=100)

    done = store.get_job(job.id)
    assert done.state is JobState.SUCCEEDED and done.interruptions == 1, done.message
    attempts = store.job_attempts(job.id)
    assert [(a["attempt"], a["node_rank"], a["outcome"]) for a in attempts] == [
        (1, 0, "checkpointed"), (1, 1, "checkpointed"), (2, 0, "succeeded"), (2, 1, "succeeded")]  # fmt: skip
    assert reclaimed not in {a["instance_id"] for a in attempts if a["attempt"] == 2}

    root = Path(config.data_path) / "local-instances"
    ckpt = Path(config.data_path) / "checkpoints" / job.id
    # the notice reached both members: each node's agent wrote it for its rank
    notices = {rank: node_file(root, "notices", f"{job.id}-1-{rank}.json") for rank in (0, 1)}
    # both ranks ran every step exactly once, stopping attempt 1 at the same step
    logs = {rank: steps_by_attempt(ckpt / f"rank-{rank}" / "steps.log") for rank in (0, 1)}
    stopped = {rank: max(s for s, a in logs[rank] if a == 1) for rank in (0, 1)}
    assert stopped[0] == stopped[1], f"the gang checkpointed at one step: {stopped}"
    common = stopped[0]
    assert 40 <= common < STEPS
    for rank in (0, 1):
        assert [s for s, _ in logs[rank]] == list(range(1, STEPS + 1)), f"rank {rank}: no step lost or repeated"
        assert {a for s, a in logs[rank] if s > common} == {2}
    saved = {rank: ckpt / f"rank-{rank}" / f"ckpt-{common:012d}.pt" for rank in (0, 1)}
    assert all(p.exists() for p in saved.values())
    first_logs = {rank: node_file(root, "logs", f"{job.id}-1-{rank}.log").read_text() for rank in (0, 1)}
    for rank, text in first_logs.items():
        assert f"rank {rank}: checkpoint at step {common} (gang: 2/2 ranks heard)" in text, text
    second = {rank: node_file(root, "logs", f"{job.id}-2-{rank}.log").read_text() for rank in (0, 1)}
    for rank, text in second.items():
        assert f"rank {rank}/2 attempt 2: starting at step {common} of {STEPS}" in text, text
    match = FINAL.search(second[0])
    assert match, second[0]
    final = float(match.group(1))
    assert final == expected, f"resumed run's final loss {final!r} != uninterrupted {expected!r}"

    def stamp(pattern: str, text: str) -> datetime:
        m = re.search(pattern + r".*? t=(\d+\.\d+)", text)
        assert m, pattern
        return datetime.fromtimestamp(float(m.group(1)), UTC)

    def utc(when: datetime) -> datetime:
        return when if when.tzinfo else when.replace(tzinfo=UTC)

    rebound = utc(min(a["bound_at"] for a in attempts if a["attempt"] == 2))
    timeline = [
        ("notice injected on node 1 (reclaimed)", noticed),
        *[(f"notice delivered to node {r}", at(notices[r])) for r in (0, 1)],
        *[
            (f"rank {r} checkpoint at step {common}", stamp(f"rank {r}: checkpoint at step {common}", first_logs[r]))
            for r in (0, 1)
        ],
        ("gang rebound (attempt 2)", rebound),
        *[(f"rank {r} resumed at step {common}", stamp("starting at step", second[r])) for r in (0, 1)],
        *[
            (f"node {a['node_rank']} finished (step {STEPS})", utc(a["ended_at"]))
            for a in attempts
            if a["attempt"] == 2
        ],
    ]
    print(f"\nDDP gang timeline (job {job.id}; reclaimed {reclaimed}, kept {other}):")
    for what, when in timeline:
        print(f"  +{(when - noticed).total_seconds():7.3f}s  {what}")
    print(f"  final loss {final!r} == uninterrupted {expected!r}")
    for r in (0, 1):
        assert at(notices[r]) <= stamp(f"rank {r}: checkpoint at step {common}", first_logs[r]), "heard, then saved"
