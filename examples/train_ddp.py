#!/usr/bin/env python3
"""A preemption-safe multi-node PyTorch DDP loop (needs ``torch``; gloo on CPU).

Run it as a spotfleet gang job (``resources.nodes: 2``); every node runs

    python examples/train_ddp.py --steps 300

which starts ``torchrun`` (``torch.distributed.run``, the code behind the
``torchrun`` command) with the gang's rendezvous from the environment spotfleet
gives each node (``NNODES``, ``NODE_RANK``, ``NPROC_PER_NODE``, ``MASTER_ADDR``,
``MASTER_PORT``) and passes the workers' "checkpointed" exit (85) on: torchrun
itself turns any worker exit into 1, and forwards the checkpoint signal to the
workers (torchrun starts each in a session of its own, out of reach of the
signal the agent sends to the job's process group). Each worker is this file again (under
torchrun: ``LOCAL_RANK`` is set).

The gang protocol (docs/checkpointing.md): a notice reaches the nodes at
different times (the reclaimed node's agent sees it first, the others hear it
from the controller a heartbeat later), but DDP ranks run in lock-step, so no
rank may stop on its own. After every step the ranks all-reduce three flags —
heard a checkpoint request, must exit, urgent — and save **together, at the same
step**, once every rank has heard (or once one rank has waited ``--gang-wait``
seconds or its deadline is near: then the others save without having heard).
Each rank saves its own file (``rank-<r>/``), so a rank's RNG or shard state
could go there too; on start the ranks resume from the newest step every rank
has. Data is a function of (step, rank), so a resumed run computes exactly what
an uninterrupted one would.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from spotfleet.checkpoint import (
    CHECKPOINTED_EXIT_CODE,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_SIGNAL,
    ENV_PROGRESS_FILE,
    Checkpointer,
)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (to watch it in tests)")
    parser.add_argument(
        "--gang-wait",
        type=float,
        default=10.0,
        help="seconds a rank that heard a notice waits for the others before the gang saves anyway",
    )
    parser.add_argument("--deadline-margin", type=float, default=20.0,
                        help="save at once when the notice's deadline is this close")  # fmt: skip
    return parser.parse_args(argv)


# ---------------------------------------------------------------- the launcher


def launch(argv: list[str]) -> int:
    """torchrun with the gang's rendezvous from spotfleet's environment; 85 when
    every failed worker exited 85 (checkpointed), else torchrun's own answer."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    env = os.environ
    nnodes = env.get("NNODES", "1")
    args = [f"--nnodes={nnodes}", f"--nproc-per-node={env.get('NPROC_PER_NODE', '1')}",
            f"--node-rank={env.get('NODE_RANK', '0')}", "--max-restarts=0", "--monitor-interval=0.1"]  # fmt: skip
    if nnodes == "1" and "MASTER_ADDR" not in env:
        args.append("--standalone")
    else:
        args += [
            f"--master-addr={env.get('MASTER_ADDR', '127.0.0.1')}",
            f"--master-port={env.get('MASTER_PORT', '29500')}",
        ]

    # torchrun starts each worker in a session of its own, so the checkpoint signal
    # the agent sends to the job's process group reaches only torchrun: pass it on
    def forward(signum: int, _frame: object) -> None:
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.send_signal(signum)

    name = os.environ.get(ENV_CHECKPOINT_SIGNAL) or "SIGUSR1"
    signal.signal(signal.Signals[name if name.startswith("SIG") else "SIG" + name], forward)
    try:
        run(get_args_parser().parse_args([*args, __file__, *argv]))
    except ChildFailedError as exc:
        codes = {f.exitcode for f in exc.failures.values()}
        print(f"train_ddp: workers exited {sorted(codes)}", flush=True)
        return CHECKPOINTED_EXIT_CODE if codes == {CHECKPOINTED_EXIT_CODE} else 1
    return 0


# ---------------------------------------------------------------- a worker


def batch(step: int, rank: int, *, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic per (step, rank): a resumed run sees the data it would have seen."""
    gen = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(size, 16, generator=gen)
    y = x @ torch.arange(16, dtype=torch.float32).unsqueeze(1) / 16 + 0.1 * torch.randn(size, 1, generator=gen)
    return x, y


def eval_loss(model: nn.Module) -> float:
    x, y = batch(10**6, 0, size=1024)
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))


def worker(args: argparse.Namespace) -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    base = Path(os.environ.get(ENV_CHECKPOINT_DIR) or "checkpoints")
    env = {**os.environ, ENV_CHECKPOINT_DIR: str(base / f"rank-{rank}")}
    if local_rank != 0:
        env.pop(ENV_PROGRESS_FILE, None)  # one progress report per node
    ckpt = Checkpointer(env=env, keep=3)
    ckpt.install()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-2)

    # resume from the newest step every rank has
    mine = {c.step: c for c in ckpt.checkpoints()}
    newest = torch.tensor([max(mine, default=-1)], dtype=torch.int64)
    dist.all_reduce(newest, op=dist.ReduceOp.MIN)
    step = 0
    if int(newest) >= 0:
        state = torch.load(mine[int(newest)].path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
    print(f"rank {rank}/{world} attempt {ckpt.attempt}: starting at step {step} of {args.steps} t={time.time():.3f}",
          flush=True)  # fmt: skip
    ckpt.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    steps_log = open(ckpt.checkpoint_dir / "steps.log", "a")

    def save(why: str) -> None:
        with ckpt.writing(step=step, suffix=".pt") as tmp:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
        print(f"rank {rank}: checkpoint at step {step} ({why}) t={time.time():.3f}", flush=True)

    heard_at: float | None = None
    started, first = time.monotonic(), step
    loss = torch.tensor(0.0)
    while step < args.steps:
        x, y = batch(step, rank, size=args.batch_size)
        loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        steps_log.write(f"{step} {ckpt.attempt}\n")
        steps_log.flush()
        rate = (step - first) * args.batch_size * world / max(time.monotonic() - started, 1e-9)
        ckpt.report_progress(step=step, samples_per_s=round(rate, 1), loss=loss.item())

        # the gang decides together: [heard, must exit, urgent], summed over ranks
        heard = ckpt.should_checkpoint()
        if heard and heard_at is None:
            heard_at = time.monotonic()
            print(f"rank {rank}: heard the checkpoint request after step {step} t={time.time():.3f}", flush=True)
        notice = ckpt.notice() if heard else None
        left = notice.seconds_remaining() if notice is not None else None
        urgent = heard_at is not None and (
            time.monotonic() - heard_at >= args.gang_wait or (left is not None and left < args.deadline_margin)
        )
        flags = torch.tensor([float(heard), float(ckpt.should_exit()), float(urgent)])
        dist.all_reduce(flags)
        gang = bool(flags[0] == world or flags[2] > 0)
        if gang:
            save(f"gang: {int(flags[0])}/{world} ranks heard")
            heard_at = None
            if flags[1] > 0:
                print(f"rank {rank}: checkpointed at step {step}; exiting to be resumed", flush=True)
                steps_log.close()
                ckpt.report_progress(step=step, force=True)
                sys.stdout.flush()
                # at once: a gloo group's teardown can wait on a peer that is already gone
                os._exit(CHECKPOINTED_EXIT_CODE)
        elif step % args.checkpoint_every == 0:
            save("periodic")
            if heard:
                ckpt.request_checkpoint()  # still owed to the gang
        if args.step_seconds:
            time.sleep(args.step_seconds)

    save("final")
    final = eval_loss(model)
    if rank == 0:
        print(f"done: {step} steps, final loss {final!r}", flush=True)
    steps_log.close()
    dist.destroy_process_group()
    return 0


def main() -> int:
    if "LOCAL_RANK" in os.environ:  # a worker, started by torchrun
        return worker(parse(sys.argv[1:]))
    parse(sys.argv[1:])  # fail early on a bad flag
    return launch(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
