#!/usr/bin/env python3
"""A job that ignores the checkpoint signal and only checkpoints periodically.

What happens to a job that does not take part in the notice protocol: it
ignores ``SIGUSR1``, so the agent's ``SIGTERM`` (at the deadline minus the
grace) ends it, or ``SIGKILL`` with ``--ignore-sigterm``. It resumes from its
last periodic checkpoint and loses at most ``--checkpoint-every`` steps.

Same log and result files as ``train_counter.py``.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path

from spotfleet import checkpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--step-seconds", type=float, default=0.01)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--ignore-sigterm", action="store_true", help="ignore SIGTERM too (only SIGKILL ends it)")
    parser.add_argument("--log", type=Path)
    args = parser.parse_args()

    ckpt = checkpoint.default()
    signal.signal(ckpt.signum, signal.SIG_IGN)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    saved = ckpt.latest()
    step = int(saved.read_json()["step"]) if saved else 0
    print(f"attempt {ckpt.attempt}: starting at step {step} of {args.steps}", flush=True)

    log_path = args.log or ckpt.checkpoint_dir / "steps.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as log:
        while step < args.steps:
            time.sleep(args.step_seconds)
            step += 1
            log.write(f"{ckpt.attempt} {step}\n")
            log.flush()
            ckpt.report_progress(step=step)
            if step % args.checkpoint_every == 0:
                ckpt.save_json({"step": step}, step=step)

    (ckpt.checkpoint_dir / "result.json").write_text(json.dumps({"steps": step, "attempt": ckpt.attempt}))
    print(f"done: {step} steps (attempt {ckpt.attempt})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
