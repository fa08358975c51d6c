"""Runs job processes on a node and converges them on the controller's wishes.

Each job node runs as a subprocess in its own process group (so one signal
reaches the whole job: launcher, workers, data loaders) with the SPOTFLEET_*
environment, its output in a log file. ``reconcile(assignments)`` starts what
should run and stops what should not; a drain order delivers the checkpoint
request (notice file + signal) and escalates to SIGTERM, then SIGKILL, if the
job has not left by the deadline minus its grace. Time comes from the injected
clock; ``tick()`` is called by the agent loop, nothing here sleeps.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from spotfleet.clock import Clock
from spotfleet.wire import Assignment, CheckpointInfo, JobStatus

log = logging.getLogger(__name__)
Key = tuple[str, int, int]  # job id, attempt, node rank


def _signal_number(name: str) -> int:
    return int(getattr(signal, name if name.startswith("SIG") else "SIG" + name))


@dataclass
class JobProcess:
    assignment: Assignment
    popen: subprocess.Popen[bytes]
    log_path: Path
    notice_file: Path
    progress_file: Path
    started_at: datetime
    exit_code: int | None = None
    drain_sent_at: datetime | None = None
    term_sent_at: datetime | None = None
    kill_sent: bool = False
    stop_requested_at: datetime | None = None
    next_periodic: datetime | None = None
    shipped: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        a = self.assignment
        return (a.job_id, a.attempt, a.node_rank)

    @property
    def pgid(self) -> int:
        return self.popen.pid

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)

    def poll(self) -> int | None:
        if self.exit_code is None:
            code = self.popen.poll()
            if code is not None:
                self.exit_code = code
                self.signal_group(signal.SIGKILL)  # reap leftovers of the group
        return self.exit_code


class JobRunner:
    def __init__(self, *, work_dir: Path, clock: Clock, gpu_count: int, kill_grace: float = 5.0) -> None:
        self.work_dir = work_dir
        self.clock = clock
        self.gpu_count = gpu_count
        self.kill_grace = timedelta(seconds=kill_grace)
        self.procs: dict[Key, JobProcess] = {}
        for sub in ("logs", "notices", "progress"):
            (work_dir / sub).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ converge

    def reconcile(self, assignments: list[Assignment]) -> None:
        desired = {(a.job_id, a.attempt, a.node_rank): a for a in assignments}
        for key, proc in list(self.procs.items()):
            if key not in desired:
                if proc.poll() is not None:
                    del self.procs[key]  # the controller has seen the exit
                elif proc.stop_requested_at is None:
                    self.stop(proc, reason="no longer assigned")
        for key, a in desired.items():
            current = self.procs.get(key)
            if current is None:
                self.procs[key] = self.start(a)
                continue
            current.assignment = a
            if a.drain is not None and current.drain_sent_at is None and current.poll() is None:
                self.deliver_drain(current, kind="drain", deadline=a.drain.deadline)
            elif a.checkpoint_now and not current.extra.get("early_checkpoint") and current.poll() is None:
                current.extra["early_checkpoint"] = True  # once: a soft warning asks for one checkpoint
                current.signal_group(_signal_number(a.checkpoint_signal))

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
        env.update({
            "SPOTFLEET_JOB_ID": a.job_id,
            "SPOTFLEET_JOB_NAME": a.name,
            "SPOTFLEET_ATTEMPT": str(a.attempt),
            "SPOTFLEET_NODE_RANK": str(a.node_rank),
            "SPOTFLEET_NUM_NODES": str(a.num_nodes),
            "SPOTFLEET_CHECKPOINT_DIR": str(checkpoint_dir),
            "SPOTFLEET_RESUME": "1" if resume else "0",
            "SPOTFLEET_NOTICE_FILE": str(notice_file),
            "SPOTFLEET_PROGRESS_FILE": str(progress_file),
            "SPOTFLEET_CHECKPOINT_SIGNAL": a.checkpoint_signal,
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in a.gpu_indices),
            "PYTHONUNBUFFERED": "1",
        })  # fmt: skip
        if a.peers:
            env["SPOTFLEET_PEERS"] = ",".join(a.peers)
        argv = a.command if isinstance(a.command, list) else ["/bin/sh", "-c", a.command]
        if argv and argv[0] in ("python", "python3"):
            argv = [sys.executable, *argv[1:]]  # the agent's interpreter, so the helper library is importable
        cwd = a.workdir or str(self.work_dir)
        for stale in (notice_file, progress_file):
            stale.unlink(missing_ok=True)
        log_fh = open(log_path, "ab")
        try:
            popen = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log_fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, process_group=0)  # fmt: skip
        except OSError as exc:
            log_fh.write(f"spotfleet: cannot start {shlex.join(argv)}: {exc}\n".encode())
            log_fh.close()
            popen = subprocess.Popen([sys.executable, "-c", "raise SystemExit(127)"], process_group=0)
        else:
            log_fh.close()
        proc = JobProcess(a, popen, log_path, notice_file, progress_file, started_at=now)
        if a.checkpoint_interval_seconds:
            proc.next_periodic = now + timedelta(seconds=a.checkpoint_interval_seconds)
        log.info("started %s attempt %s node %s as pid %s", a.job_id, a.attempt, a.node_rank, popen.pid)
        if a.drain is not None:
            self.deliver_drain(proc, kind="drain", deadline=a.drain.deadline)
        return proc

    def stop(self, proc: JobProcess, *, reason: str) -> None:
        log.info("stopping %s: %s", proc.key, reason)
        proc.stop_requested_at = self.clock.now()
        proc.signal_group(signal.SIGTERM)

    # ------------------------------------------------------------ notices

    def deliver_drain(self, proc: JobProcess, *, kind: str, deadline: datetime) -> None:
        """Write the notice file, then signal the job's process group."""
        now = self.clock.now()
        payload = {
            "kind": kind,
            "deadline": deadline.isoformat(),
            "seconds_left": max(0.0, (deadline - now).total_seconds()),
        }
        tmp = proc.notice_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload))
        os.replace(tmp, proc.notice_file)
        proc.drain_sent_at = now
        proc.extra["drain_deadline"] = deadline
        proc.signal_group(_signal_number(proc.assignment.checkpoint_signal))

    def notice_all(self, *, kind: str, deadline: datetime) -> None:
        """A notice seen locally: every running job hears it at once, without
        waiting for the controller's round trip."""
        for proc in self.procs.values():
            if proc.poll() is None and proc.drain_sent_at is None:
                self.deliver_drain(proc, kind=kind, deadline=deadline)

    def tick(self) -> None:
        """Escalate overdue drains and stops; send periodic checkpoint requests."""
        now = self.clock.now()
        for proc in self.procs.values():
            if proc.poll() is not None:
                continue
            grace = timedelta(seconds=proc.assignment.grace_seconds)
            deadline = proc.extra.get("drain_deadline")
            if isinstance(deadline, datetime) and proc.term_sent_at is None and now >= deadline - grace:
                proc.term_sent_at = now
                proc.signal_group(signal.SIGTERM)
            stop_at = proc.stop_requested_at or proc.term_sent_at
            if stop_at is not None and not proc.kill_sent and now - stop_at >= min(self.kill_grace, grace):
                proc.kill_sent = True
                proc.signal_group(signal.SIGKILL)
            if proc.next_periodic is not None and now >= proc.next_periodic and proc.drain_sent_at is None:
                proc.signal_group(_signal_number(proc.assignment.checkpoint_signal))
                interval = proc.assignment.checkpoint_interval_seconds or 0
                proc.next_periodic = now + timedelta(seconds=interval)

    # ------------------------------------------------------------ report

    def statuses(self) -> list[JobStatus]:
        out = []
        for proc in self.procs.values():
            code = proc.poll()
            progress = read_progress(proc.progress_file)
            checkpoint = progress.pop("checkpoint", None)
            a = proc.assignment
            out.append(JobStatus(
                job_id=a.job_id, attempt=a.attempt, node_rank=a.node_rank,
                status="exited" if code is not None else "running", exit_code=code, progress=progress,
                checkpoint=CheckpointInfo.model_validate(checkpoint) if isinstance(checkpoint, dict) else None,
            ))  # fmt: skip
        return out

    def exited_since(self, keys: set[Key]) -> bool:
        """Has any job exited that was running at the last report?"""
        return any(self.procs[k].poll() is not None for k in keys if k in self.procs)

    def running_keys(self) -> set[Key]:
        return {k for k, p in self.procs.items() if p.exit_code is None}

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.signal_group(signal.SIGKILL)


def read_progress(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
