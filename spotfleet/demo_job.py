"""The demo's training job: counts steps, checkpoints, resumes exactly.

``python -m spotfleet.demo_job --steps 200 --step-seconds 0.05``. Built on the
job author's helper (``spotfleet.checkpoint``): it resumes from the newest
checkpoint, saves every ``--checkpoint-every`` steps and whenever the agent asks,
and leaves with the "checkpointed, resume me" exit code when a reclaim is coming.
"""

from __future__ import annotations

import argparse
import time

from spotfleet import checkpoint


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=20)
    args = p.parse_args(argv)
    ckpt = checkpoint.default()
    ckpt.install()
    saved = ckpt.latest()
    step = int(saved.read_json()["step"]) if saved else 0
    print(f"attempt {ckpt.attempt}: starting at step {step} of {args.steps}", flush=True)
    while step < args.steps:
        time.sleep(args.step_seconds)
        step += 1
        ckpt.report_progress(step=step, total_steps=args.steps)
        if step % args.checkpoint_every == 0 or ckpt.should_checkpoint():
            ckpt.save_json({"step": step}, step=step)
            if ckpt.should_exit():
                print(f"checkpointed at step {step}; exiting to be resumed", flush=True)
                ckpt.exit_checkpointed()
    ckpt.save_json({"step": step}, step=step)
    ckpt.report_progress(step=step, total_steps=args.steps, force=True)
    print(f"done: {step} steps", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
