#!/usr/bin/env python3
"""A preemption-safe "training" job: counts steps to a target (stdlib only).

It shows the whole protocol with nothing to install but spotfleet:

- resumes from the latest checkpoint (``checkpoint.latest()``),
- checkpoints every ``--checkpoint-every`` steps and whenever the agent asks
  (the notice signal, or SIGTERM),
- exits with ``CHECKPOINTED_EXIT_CODE`` (85) after saving when the instance is
  going away, so spotfleet resumes it elsewhere.

Every executed step is appended to a log (``ATTEMPT STEP`` per line, default
``$SPOTFLEET_CHECKPOINT_DIR/steps.log``) and the finished job writes
``result.json`` there, so a test can check that no step was lost and none
repeated beyond the last checkpoint.

    python examples/train_counter.py --steps 500 --step-seconds 0.01
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from spotfleet import checkpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="the total number of steps")
    parser.add_argument("--step-seconds", type=float, default=0.01, help="how long one step takes")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="also checkpoint every N steps (0: never)")
    parser.add_argument("--log", type=Path, help="append 'ATTEMPT STEP' for every step executed")
    args = parser.parse_args()

    ckpt = checkpoint.default()
    ckpt.install()  # SIGUSR1 (or the configured signal) and SIGTERM now set flags
    saved = ckpt.latest()
    step = int(saved.read_json()["step"]) if saved else 0
    print(f"attempt {ckpt.attempt}: starting at step {step} of {args.steps}", flush=True)

    log_path = args.log or ckpt.checkpoint_dir / "steps.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started, first = time.monotonic(), step
    with log_path.open("a") as log:
        while step < args.steps:
            time.sleep(args.step_seconds)  # the work of one step
            step += 1
            log.write(f"{ckpt.attempt} {step}\n")
            log.flush()
            rate = (step - first) / max(time.monotonic() - started, 1e-9)
            ckpt.report_progress(step=step, samples_per_s=round(rate, 2))
            periodic = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
            if periodic or ckpt.should_checkpoint():
                ckpt.save_json({"step": step}, step=step)
                if ckpt.should_exit():
                    print(f"checkpointed at step {step}; exiting to be resumed", flush=True)
                    ckpt.exit_checkpointed()

    result = {"steps": step, "attempt": ckpt.attempt}
    (ckpt.checkpoint_dir / "result.json").write_text(json.dumps(result))
    ckpt.report_progress(step=step, force=True)
    print(f"done: {step} steps (attempt {ckpt.attempt})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
