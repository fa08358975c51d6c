"""Running a job in its ``image:`` with docker or podman.

A job spec's ``image`` is never ignored: on a node with a container runtime the
agent runs the command in that image; on a node without one the attempt fails
at once with a message saying so (exit code 126), and the job's retries and
the operator see why.

The argv (``container_argv``) is built so the checkpoint protocol works exactly
as for a bare process:

- ``--init``: a tiny init is PID 1 and forwards signals to the job, so the
  checkpoint signal, SIGTERM and the exit code 85 behave as outside a container;
  the runtime's client proxies the signals the agent sends to its process group
  (``--sig-proxy``, on by default) and exits with the job's code;
- the checkpoint directory and the notice/progress files' folders are mounted at
  the same paths, so every ``SPOTFLEET_*`` path means the same inside;
- the job's environment is passed by name (``-e NAME``, values from the client's
  environment), so values never appear in ``ps``;
- GPUs by index: docker ``--gpus device=0,1`` (NVIDIA Container Toolkit),
  podman ``--device nvidia.com/gpu=0`` (CDI); inside, they are numbered from 0,
  so ``CUDA_VISIBLE_DEVICES`` is not passed;
- ``--network host`` (gang jobs reach their peers as outside), ``--ipc host``
  (PyTorch data loaders need shared memory), ``--user`` the agent's uid:gid (the
  checkpoints stay the agent's to read and clean), ``--rm`` and a name
  ``sf-JOB-ATTEMPT-RANK`` so a job whose client was killed can be removed
  (``cleanup_argv``).

``SPOTFLEET_CONTAINER_RUNTIME`` picks the runtime (``docker``, ``podman``, or
``none`` to refuse images on this node); by default the first one on the PATH.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence

RUNTIMES = ("docker", "podman")
NO_RUNTIME_EXIT = 126  # "found but cannot be executed", as a shell says


def find_runtime(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    chosen = env.get("SPOTFLEET_CONTAINER_RUNTIME", "").strip()
    if chosen == "none":
        return None
    for name in (chosen,) if chosen else RUNTIMES:
        path = shutil.which(name, path=env.get("PATH"))
        if path is not None:
            return path
    return None


def container_name(job_id: str, attempt: int, node_rank: int) -> str:
    return f"sf-{job_id}-{attempt}-{node_rank}"


def container_argv(
    runtime: str,
    *,
    image: str,
    command: Sequence[str],
    name: str,
    env_names: Sequence[str],
    mounts: Sequence[str],
    gpu_indices: Sequence[int],
    workdir: str | None,
    uid: int | None = None,
    gid: int | None = None,
) -> list[str]:
    kind = os.path.basename(runtime)
    argv = [runtime, "run", "--rm", "--init", "--name", name, "--network", "host", "--ipc", "host"]
    if uid is not None and gid is not None:
        argv += ["--user", f"{uid}:{gid}"]
    for path in sorted(set(mounts)):
        argv += ["-v", f"{path}:{path}"]
    for key in sorted(set(env_names)):
        argv += ["-e", key]
    if gpu_indices:
        if kind == "podman":
            for index in gpu_indices:
                argv += ["--device", f"nvidia.com/gpu={index}"]
        else:
            argv += ["--gpus", "device=" + ",".join(str(i) for i in gpu_indices)]
    if workdir:
        argv += ["-w", workdir]
    return [*argv, image, *command]


def cleanup_argv(runtime: str, name: str) -> list[str]:
    """Remove the container (killing it if it still runs): for a job whose
    runtime client was killed, which would otherwise leave the container up."""
    return [runtime, "rm", "-f", name]
