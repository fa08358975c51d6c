#!/usr/bin/env python3
"""A preemption-safe PyTorch training loop (needs ``torch``; CPU or GPU).

The same protocol as ``train_counter.py`` with real state: model, optimizer and
step are saved with ``torch.save`` through ``checkpoint.writing()`` (temp file,
fsync, rename), so a half-written checkpoint is never resumed from.

    python examples/train_torch.py --steps 2000 --checkpoint-every 200
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from spotfleet import checkpoint


def batch(step: int, *, size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic per step, so a resumed run sees the data it would have seen."""
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(size, 16, generator=gen)
    y = x @ torch.arange(16, dtype=torch.float32).unsqueeze(1) / 16 + 0.1 * torch.randn(size, 1, generator=gen)
    return x.to(device), y.to(device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--checkpoint-every", type=int, default=200)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    ckpt = checkpoint.default()
    ckpt.install()
    step = 0
    saved = ckpt.latest()
    if saved is not None:
        state = torch.load(saved.path, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
    print(f"attempt {ckpt.attempt} on {device}: starting at step {step} of {args.steps}", flush=True)

    def save() -> None:
        with ckpt.writing(step=step, suffix=".pt") as tmp:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)

    started, first = time.monotonic(), step
    loss = torch.tensor(0.0)
    while step < args.steps:
        x, y = batch(step, size=args.batch_size, device=device)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        rate = (step - first) * args.batch_size / max(time.monotonic() - started, 1e-9)
        ckpt.report_progress(step=step, samples_per_s=round(rate, 1), loss=float(loss))
        if step % args.checkpoint_every == 0 or ckpt.should_checkpoint():
            save()
            if ckpt.should_exit():
                print(f"checkpointed at step {step}; exiting to be resumed", flush=True)
                ckpt.exit_checkpointed()

    save()
    print(f"done: {step} steps, loss {float(loss):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
