"""Runs job processes on a node and converges them on the controller's wishes.

Each job node runs as a subprocess in its own process group (so one signal
reaches the whole job: launcher, workers, data loaders) with the SPOTFLEET_*
environment, its output in a log file. ``reconcile(assignments)`` starts what
should run and stops what should not. Notices — from the metadata watcher
(``notice``) or as drain orders from the controller — go through one
``NoticeDelivery`` (notice file, checkpoint signal, SIGTERM/SIGKILL escalation
before the deadline), as do periodic checkpoint requests. Time comes from the
injected clock; ``tick()`` is called by the agent loop, nothing here sleeps.

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

from spotfleet.agent.progress import read_progress
from spotfleet.agent.signals import JobTarget, NoticeDelivery
from spotfleet.checkpoint import job_environment
from spotfleet.clock import Clock
from spotfleet.model.events import InstanceEvent, NoticeKind
from spotfleet.wire import Assignment, CheckpointInfo, JobStatus

log = logging.getLogger(__name__)
Key = tuple[str, int, int]  # job id, attempt, node rank


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
        return self.exit_code


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
    if argv and argv[0] in ("python", "python3"):
        argv = [sys.executable, *argv[1:]]  # the agent's interpreter, so the helper library is importable
    sig = a.checkpoint_signal.removeprefix("SIG")
    if sig in ("TERM", "INT", "KILL"):
        return argv
    return ["/bin/sh", "-c", f'trap "" {sig}; exec "$0" "$@"', *argv]


def _target_id(key: Key) -> str:
    return f"{key[0]}/{key[1]}/{key[2]}"


class JobRunner:
    def __init__(self, *, work_dir: Path, clock: Clock, kill_grace: float = 5.0) -> None:
        self.work_dir = work_dir
        self.clock = clock
        self.kill_grace = timedelta(seconds=kill_grace)
        self.procs: dict[Key, JobProcess] = {}
        self.delivery = NoticeDelivery(clock=clock)
        self._lock = threading.RLock()
        for sub in ("logs", "notices", "progress"):
            (work_dir / sub).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ converge

    def reconcile(self, assignments: list[Assignment]) -> None:
        with self._lock:
            desired = {(a.job_id, a.attempt, a.node_rank): a for a in assignments}
            for key, proc in list(self.procs.items()):
                if key not in desired:
                    if proc.poll() is not None:
                        self.delivery.untrack(proc.target.job_id)
                        del self.procs[key]  # the controller has seen the exit
                    elif proc.stop_requested_at is None:
                        self.stop(proc, reason="no longer assigned")
            for key, a in desired.items():
                current = self.procs.get(key)
                if current is None:
                    current = self.procs[key] = self.start(a)
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

    def start(self, a: Assignment) -> JobProcess:
        now = self.clock.now()
        stem = f"{a.job_id}-{a.attempt}-{a.node_rank}"
        log_path = self.work_dir / "logs" / f"{stem}.log"
        notice_file = self.work_dir / "notices" / f"{stem}.json"
        progress_file = self.work_dir / "progress" / f"{stem}.json"
        checkpoint_dir = Path(a.checkpoint_dir)
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        resume = a.resume or any(checkpoint_dir.iterdir())
        env = dict(os.environ)
        env.update(a.env)
        env.update(job_environment(job_id=a.job_id, checkpoint_dir=checkpoint_dir, attempt=a.attempt, resume=resume,
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
        argv = _argv(a)
        cwd = a.workdir or str(self.work_dir)
        for stale in (notice_file, progress_file):
            stale.unlink(missing_ok=True)
        log_fh = open(log_path, "ab")
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
        return JobProcess(a, popen, target, log_path, progress_file, started_at=now)

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
                out.append(JobStatus(
                    job_id=a.job_id, attempt=a.attempt, node_rank=a.node_rank,
                    status="exited" if code is not None else "running", exit_code=code, progress=data,
                    checkpoint=CheckpointInfo.model_validate(checkpoint) if isinstance(checkpoint, dict) else None,
                ))  # fmt: skip
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
