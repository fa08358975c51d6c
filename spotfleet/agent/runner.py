"""Runs job processes on a node and converges them on the controller's wishes.

Each job node runs as a subprocess in its own process group (so one signal
reaches the whole job: launcher, workers, data loaders) with the SPOTFLEET_*
environment, its output in a log file. ``reconcile(assignments)`` starts what
should run and stops what should not. Notices — from the metadata watcher
(``notice``) or as drain orders from the controller — go through one
``NoticeDelivery`` (notice file, checkpoint signal, SIGTERM/SIGKILL escalation
before the deadline), as do periodic checkpoint requests. Time comes from the
injected clock; ``tick()`` is called by the agent loop, nothing here sleeps.

GPU shares: with a ``GpuShares`` (``isolation.py``), each job node's GPU
environment comes from its grant — a MIG device, an MPS share, time-sliced
or whole GPUs — decided before it starts; a node whose share cannot be had
here is *refused* (not started, reported ``refused`` with the reason) and its
MIG device or MPS daemon is released when it leaves.

Thread safety: the agent loop and the watcher thread both call in; one lock
serialises them (the watcher's path is a file write and a signal: microseconds).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from spotfleet.agent import container
from spotfleet.agent.isolation import GpuGrant, GpuShares, Refusal
from spotfleet.agent.jobenv import base_environment
from spotfleet.agent.progress import read_progress
from spotfleet.agent.signals import JobTarget, NoticeDelivery
from spotfleet.checkpoint import job_environment
from spotfleet.clock import Clock
from spotfleet.files import private_dir, private_file
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.model.job import NODE_ERROR_TEXT
from spotfleet.wire import Assignment, CheckpointInfo, JobStatus

log = logging.getLogger(__name__)
Key = tuple[str, int, int]  # job id, attempt, node rank
UNSTARTABLE_EXIT = 127  # the shell's "cannot execute": reported for an assignment that could not be started


@dataclass
class JobProcess:
    assignment: Assignment
    popen: subprocess.Popen[bytes]
    target: JobTarget
    log_path: Path
    progress_file: Path
    started_at: datetime
    exit_code: int | None = None
    stop_requested_at: datetime | None = None
    kill_sent: bool = False
    shipped: int = 0  # bytes of the log file sent to the controller
    remote_offset: int = 0  # the controller's size of the log (where the next chunk goes)
    cleanup: list[str] | None = None  # removes the job's container once its client is gone
    grant: GpuGrant | None = None  # its GPU share (isolation.py)
    stop_message: str | None = None  # why the agent stopped it on its own (memory share)
    node_error: str | None = None  # a GPU/driver error line in the output of a failed run
    tail_read: bool = False

    @property
    def key(self) -> Key:
        a = self.assignment
        return (a.job_id, a.attempt, a.node_rank)

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signum)

    def poll(self) -> int | None:
        if self.exit_code is None:
            code = self.popen.poll()
            if code is not None:
                self.exit_code = code
                self.signal_group(signal.SIGKILL)  # reap leftovers of the group
                self.remove_container()
        return self.exit_code

    def remove_container(self) -> None:
        if self.cleanup is not None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(self.cleanup, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30, check=False)  # fmt: skip


def _argv(a: Assignment) -> list[str]:
    """The job's command, started with its checkpoint signal *ignored*.

    Two failure modes this removes: a periodic request that lands before the job
    installed its handler would kill it (SIGUSR1's default action), and a
    shell-string command's /bin/sh would die of the signal while the real job
    saves. An ignored signal stays ignored across exec; a job that installs a
    handler (``spotfleet.checkpoint.install()``) replaces it. A job that never
    does simply does not hear the request and, on a reclaim, gets SIGTERM.
    """
    argv = a.command if isinstance(a.command, list) else ["/bin/sh", "-c", a.command]
    if argv and argv[0] in ("python", "python3") and not a.image:
        argv = [sys.executable, *argv[1:]]  # the agent's interpreter, so the helper library is importable
    sig = a.checkpoint_signal.removeprefix("SIG")
    if sig in ("TERM", "INT", "KILL"):
        return argv
    return ["/bin/sh", "-c", f'trap "" {sig}; exec "$0" "$@"', *argv]


def write_hostfile(path: Path, a: Assignment) -> Path:
    """A gang's hostfile: one line per node, by rank, ``<address> slots=<processes>``
    (the MPI / DeepSpeed form; ``cut -d' ' -f1`` gives bare addresses). A node whose
    address is not known yet is written as its instance id."""
    slots = a.env.get("NPROC_PER_NODE", "1")
    lines = [f"{addr or peer} slots={slots}" for peer, addr in zip(a.peers, a.peer_addresses, strict=False)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _node_error_line(log_path: Path, tail_bytes: int = 16384) -> str | None:
    """The last line of a failed job's output that blames the GPU or its driver
    (CUDA/NVML errors, Xid, ECC): the controller's retry then avoids this node."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, log_path.stat().st_size - tail_bytes))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    hits = [line.strip() for line in text.splitlines() if NODE_ERROR_TEXT.search(line)]
    return hits[-1][:300] if hits else None


def _target_id(key: Key) -> str:
    return f"{key[0]}/{key[1]}/{key[2]}"


class JobRunner:
    def __init__(
        self,
        *,
        work_dir: Path,
        clock: Clock,
        kill_grace: float = 5.0,
        shares: GpuShares | None = None,
        container_runtime: str | None = None,
    ) -> None:
        """``container_runtime``: docker/podman for jobs with an ``image``
        (default: found on the PATH, see ``spotfleet.agent.container``)."""
        self.container_runtime = container_runtime if container_runtime is not None else container.find_runtime()
        self.work_dir = work_dir
        self.shares = shares
        self.refused: dict[Key, tuple[Assignment, str]] = {}  # assigned, but its GPU share cannot be had here
        self.unstartable: dict[Key, tuple[Assignment, str]] = {}  # assigned, but it could not be started at all
        self.clock = clock
        self.kill_grace = timedelta(seconds=kill_grace)
        self.procs: dict[Key, JobProcess] = {}
        self.delivery = NoticeDelivery(clock=clock)
        self._lock = threading.RLock()
        for sub in ("logs", "notices", "progress"):
            private_dir(work_dir / sub)

    # ------------------------------------------------------------ converge

    def reconcile(self, assignments: list[Assignment]) -> None:
        with self._lock:
            desired = {(a.job_id, a.attempt, a.node_rank): a for a in assignments}
            for key, proc in list(self.procs.items()):
                if key not in desired:
                    if proc.poll() is not None:
                        self.delivery.untrack(proc.target.job_id)
                        del self.procs[key]  # the controller has seen the exit
                        if self.shares is not None:
                            self.shares.release(key)
                    elif proc.stop_requested_at is None:
                        self.stop(proc, reason="no longer assigned")
            for key in [k for k in self.refused if k not in desired]:
                del self.refused[key]
            for key in [k for k in self.unstartable if k not in desired]:
                del self.unstartable[key]
            for key, a in desired.items():
                current = self.procs.get(key)
                if current is None and (key in self.refused or key in self.unstartable):
                    continue
                if current is None:
                    grant = self.shares.grant(key, a) if self.shares is not None else None
                    if isinstance(grant, Refusal):
                        log.warning("refusing %s attempt %s node %s: %s", *key, grant.reason)
                        self.refused[key] = (a, grant.reason)
                        continue
                    try:
                        current = self.procs[key] = self.start(a, grant)
                    except (OSError, ValueError) as exc:
                        # Design choice: one assignment that cannot start (a NUL byte in its
                        # command, an unusable checkpoint dir...) is that job's failure, reported
                        # as such; it must not take down the reconcile of every other job here
                        # (issue 14: an agent wedged on "embedded null byte" forever).
                        reason = f"cannot start: {type(exc).__name__}: {exc}"
                        log.error("%s attempt %s node %s %s", *key, reason)
                        self.unstartable[key] = (a, reason)
                        if self.shares is not None:
                            self.shares.release(key)
                        continue
                current.assignment = a
                if current.poll() is not None:
                    continue
                if a.drain is not None:  # idempotent: only a more urgent notice is re-delivered
                    self.delivery.deliver(self._event(NoticeKind.SPOT_INTERRUPTION, a.drain.deadline, a.drain.reason),
                                          [current.target])  # fmt: skip
                elif a.checkpoint_now:
                    self.delivery.deliver(self._event(NoticeKind.REBALANCE, None, "rebalance recommendation"),
                                          [current.target])  # fmt: skip

    def _event(self, kind: NoticeKind, deadline: datetime | None, detail: str) -> InstanceEvent:
        return InstanceEvent("controller", "", kind, self.clock.now(), deadline, source="controller", detail=detail)

    def start(self, a: Assignment, grant: GpuGrant | None = None) -> JobProcess:
        now = self.clock.now()
        stem = f"{a.job_id}-{a.attempt}-{a.node_rank}"
        log_path = self.work_dir / "logs" / f"{stem}.log"
        notice_file = self.work_dir / "notices" / f"{stem}.json"
        progress_file = self.work_dir / "progress" / f"{stem}.json"
        checkpoint_dir = Path(a.checkpoint_dir)
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        checkpoint_dir.chmod(0o700)
        resume = a.resume or any(checkpoint_dir.iterdir())
        env = base_environment(os.environ)  # never the agent's own secrets (jobenv.py)
        env.update(a.env)
        env.update(job_environment(job_id=a.job_id, checkpoint_dir=checkpoint_dir, attempt=a.run or a.attempt,
                                   resume=resume,
                                   notice_file=notice_file, progress_file=progress_file,
                                   signal_name=a.checkpoint_signal))  # fmt: skip
        env.update({
            "SPOTFLEET_JOB_NAME": a.name,
            "SPOTFLEET_NODE_RANK": str(a.node_rank),
            "SPOTFLEET_NUM_NODES": str(a.num_nodes),
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in a.gpu_indices),
            "PYTHONUNBUFFERED": "1",
        })  # fmt: skip
        if a.peers:
            env["SPOTFLEET_PEERS"] = ",".join(a.peers)
        if a.peer_addresses:
            env["SPOTFLEET_HOSTFILE"] = str(write_hostfile(self.work_dir / "hostfiles" / f"{stem}", a))
        if grant is not None:
            env.update(grant.env)  # its MIG device, MPS share or GPUs (isolation.py)
        argv = _argv(a)
        cwd = a.workdir or str(self.work_dir)
        cleanup: list[str] | None = None
        if a.image:
            granted = [k for k in (grant.env if grant is not None else {}) if k != "CUDA_VISIBLE_DEVICES"]
            argv, cleanup = self._containerized(
                a, argv, env, [checkpoint_dir, notice_file.parent, progress_file.parent], granted
            )
            cwd = str(self.work_dir)
        for stale in (notice_file, progress_file):
            stale.unlink(missing_ok=True)
        log_fh = open(private_file(log_path), "ab")
        try:
            popen = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log_fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, process_group=0)  # fmt: skip
        except OSError as exc:
            log_fh.write(f"spotfleet: cannot start {shlex.join(argv)}: {exc}\n".encode())
            popen = subprocess.Popen([sys.executable, "-c", "raise SystemExit(127)"], process_group=0)
        finally:
            log_fh.close()
        interval = timedelta(seconds=a.checkpoint_interval_seconds) if a.checkpoint_interval_seconds else None
        target = JobTarget.for_process(_target_id((a.job_id, a.attempt, a.node_rank)), popen, notice_file=notice_file,
                                       signal_name=a.checkpoint_signal, grace=timedelta(seconds=a.grace_seconds),
                                       interval=interval)  # fmt: skip
        self.delivery.track(target)
        log.info("started %s attempt %s node %s as pid %s", a.job_id, a.attempt, a.node_rank, popen.pid)
        return JobProcess(a, popen, target, log_path, progress_file, started_at=now, grant=grant, cleanup=cleanup)

    def _containerized(
        self, a: Assignment, argv: list[str], env: dict[str, str], mounts: list[Path], granted: list[str]
    ) -> tuple[list[str], list[str] | None]:
        """The argv that runs ``argv`` in the job's image, or one that fails with
        a message when this node has no container runtime (never run the job
        outside the image it asked for)."""
        assert a.image is not None
        runtime = self.container_runtime
        if runtime is None:
            message = (f"spotfleet: {a.job_id} asks for image {a.image!r} but this node has no container runtime "
                       "(install docker or podman, or set SPOTFLEET_CONTAINER_RUNTIME); not running it outside "
                       "its image")  # fmt: skip
            return [sys.executable, "-c", f"import sys; print({message!r}, flush=True); "
                                          f"sys.exit({container.NO_RUNTIME_EXIT})"], None  # fmt: skip
        names = {*a.env, *granted, *(k for k in env if k.startswith("SPOTFLEET_")), "PYTHONUNBUFFERED"}
        name = container.container_name(a.job_id, a.attempt, a.node_rank)
        wrapped = container.container_argv(
            runtime, image=a.image, command=argv, name=name, env_names=sorted(names), mounts=[str(m) for m in mounts],
            gpu_indices=a.gpu_indices, workdir=a.workdir, uid=os.getuid(), gid=os.getgid(),
        )  # fmt: skip
        return wrapped, container.cleanup_argv(runtime, name)

    def stop_for(self, key: Key, reason: str) -> None:
        """Stop a job node on the agent's own authority (over its memory share): the
        reason goes to the controller with its exit."""
        with self._lock:
            proc = self.procs.get(key)
            if proc is None or proc.poll() is not None:
                return
            proc.stop_message = reason
            self.stop(proc, reason=reason)

    def grants(self) -> dict[Key, GpuGrant]:
        with self._lock:
            return {k: p.grant for k, p in self.procs.items() if p.grant is not None and p.exit_code is None}

    def stop(self, proc: JobProcess, *, reason: str) -> None:
        log.info("stopping %s: %s", proc.key, reason)
        proc.stop_requested_at = self.clock.now()
        proc.signal_group(signal.SIGTERM)

    # ------------------------------------------------------------ notices

    def notice(self, event: InstanceEvent) -> None:
        """A notice seen locally: every job hears it at once, without waiting
        for the controller's round trip."""
        with self._lock:
            self.delivery.deliver(event)

    def tick(self) -> None:
        """Escalate overdue drains and stops; send periodic checkpoint requests."""
        with self._lock:
            now = self.clock.now()
            self.delivery.tick(now)
            for proc in self.procs.values():
                if proc.poll() is not None or proc.stop_requested_at is None or proc.kill_sent:
                    continue
                if now - proc.stop_requested_at >= self.kill_grace:
                    proc.kill_sent = True
                    proc.signal_group(signal.SIGKILL)
                    proc.remove_container()  # a killed client leaves its container running

    # ------------------------------------------------------------ report

    def statuses(self) -> list[JobStatus]:
        with self._lock:
            out = []
            for proc in self.procs.values():
                code = proc.poll()
                progress = read_progress(proc.progress_file)
                data = progress.to_dict() if progress is not None else {}
                checkpoint = data.pop("checkpoint", None)
                a = proc.assignment
                g = proc.grant
                if code not in (None, 0) and not proc.tail_read:
                    proc.tail_read, proc.node_error = True, _node_error_line(proc.log_path)
                out.append(JobStatus(
                    job_id=a.job_id, attempt=a.attempt, node_rank=a.node_rank,
                    status="exited" if code is not None else "running", exit_code=code, progress=data,
                    checkpoint=CheckpointInfo.model_validate(checkpoint) if isinstance(checkpoint, dict) else None,
                    isolation=g.isolation if g else None, isolation_note=g.note if g else None,
                    message=proc.stop_message, node_error=proc.node_error,
                ))  # fmt: skip
            for (job_id, attempt, rank), (_, reason) in self.refused.items():
                out.append(JobStatus(job_id=job_id, attempt=attempt, node_rank=rank, status="refused", message=reason))
            for (job_id, attempt, rank), (_, reason) in self.unstartable.items():
                out.append(JobStatus(job_id=job_id, attempt=attempt, node_rank=rank, status="exited",
                                     exit_code=UNSTARTABLE_EXIT, message=reason))  # fmt: skip
            return out

    def exited_since(self, keys: set[Key]) -> bool:
        """Has any job exited that was running at the last report?"""
        with self._lock:
            return any(self.procs[k].poll() is not None for k in keys if k in self.procs)

    def running_keys(self) -> set[Key]:
        with self._lock:
            return {k for k, p in self.procs.items() if p.exit_code is None}

    def stop_all(self) -> None:
        with self._lock:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.signal_group(signal.SIGKILL)
