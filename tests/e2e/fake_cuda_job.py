"""A stand-in CUDA job for e2e tests — TEST ONLY.

It prints the GPU environment the agent gave it, registers itself in the fake
driver's process table (``$FAKE_GPU_PROCS/<pid>.json``: the device from its
``CUDA_VISIBLE_DEVICES``, the memory it "holds", its SM use), runs for a while
and exits 0 — unless stopped first.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

KEYS = ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--memory-mib", type=int, required=True)
    p.add_argument("--sm", type=int, default=50)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    env = {k: os.environ.get(k) for k in KEYS}
    print("GPU-ENV " + json.dumps(env, sort_keys=True), flush=True)
    record = Path(os.environ["FAKE_GPU_PROCS"]) / f"{os.getpid()}.json"
    record.write_text(json.dumps({"pid": os.getpid(), "device": env["CUDA_VISIBLE_DEVICES"],
                                  "memory_mib": args.memory_mib, "sm": args.sm}))  # fmt: skip
    time.sleep(args.seconds)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
