"""The demo's training job: counts steps, checkpoints, resumes exactly.

Run as ``python -m spotfleet.demo_job --steps 200 --step-seconds 0.05``. It uses
the SPOTFLEET_* environment the agent provides: it resumes from the newest
checkpoint in SPOTFLEET_CHECKPOINT_DIR, checkpoints on the checkpoint signal and
exits with the "checkpointed, resume me" code, and reports progress.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

CHECKPOINTED_EXIT_CODE = 85


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--checkpoint-every", type=int, default=20)
    args = p.parse_args(argv)
    ckpt_dir = Path(os.environ.get("SPOTFLEET_CHECKPOINT_DIR", "."))
    progress_file = os.environ.get("SPOTFLEET_PROGRESS_FILE")
    ckpt = ckpt_dir / "state.json"
    step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
    asked = False

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        nonlocal asked
        asked = True

    signal.signal(signal.SIGUSR1, _on_signal)
    last_ckpt: dict[str, object] | None = None

    def save() -> None:
        nonlocal last_ckpt
        tmp = ckpt.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": step}))
        os.replace(tmp, ckpt)
        last_ckpt = {"path": str(ckpt), "step": step, "at": datetime.now(UTC).isoformat()}

    def report() -> None:
        if progress_file:
            data = {"step": step, "total_steps": args.steps}
            if last_ckpt:
                data["checkpoint"] = last_ckpt
            tmp = Path(progress_file + ".tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, progress_file)

    print(f"starting at step {step} of {args.steps} (attempt {os.environ.get('SPOTFLEET_ATTEMPT')})", flush=True)
    while step < args.steps:
        time.sleep(args.step_seconds)
        step += 1
        if step % args.checkpoint_every == 0:
            save()
        report()
        if asked:
            asked = False
            save()
            report()
            notice = os.environ.get("SPOTFLEET_NOTICE_FILE")
            if notice and Path(notice).exists():  # a reclaim is coming: leave now
                print(f"checkpointed at step {step}; exiting to be resumed", flush=True)
                return CHECKPOINTED_EXIT_CODE
            print(f"periodic checkpoint at step {step}", flush=True)
    save()
    report()
    print(f"done: {step} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
