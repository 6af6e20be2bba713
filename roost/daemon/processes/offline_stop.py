"""`roost stop` while no daemon runs (docs/reliability.md, "Workers that outlive the daemon"): the
worker of a job is found by its shim's record, checked by pid and start time, and its tree ended,
SIGTERM then SIGKILL, then its shim. Only a daemon writes the store: what the person did is left
as a stop mark beside the record (``JOB.stop``, written before anything is signalled), which the
next daemon's recovery reads to record the job as stopped by a person, not as a worker lost."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from roost.config import HostSettings
from roost.daemon.processes.shim_link import ShimRecord
from roost.hosts.link import last_line, one_off
from roost.proctree import boot_id, read_proc, record_path

#: How long the worker's tree has after SIGTERM before SIGKILL.
GRACE = 3.0
#: How long reaching a worker's host may take (the login, then ending its tree there).
REACH_TIMEOUT = 30.0
REASON = "stopped by a person while no daemon ran (roost stop)"


@dataclass(frozen=True)
class StopMark:
    """A person's stop of the worker ``pid`` (with its start time) that no daemon has recorded yet."""

    job: str
    pid: int
    start: int
    at: float
    reason: str

    @staticmethod
    def path(state_dir: Path, job_id: str) -> Path:
        return record_path(state_dir, job_id).with_suffix(".stop")

    def save(self, state_dir: Path) -> None:
        path = self.path(state_dir, self.job)
        tmp = path.with_suffix(".stop-tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"pid": self.pid, "start": self.start, "at": self.at, "reason": self.reason}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    @classmethod
    def load_all(cls, state_dir: Path) -> dict[str, "StopMark"]:
        """Every stop mark in the state directory, by job (one that cannot be read is none)."""
        out: dict[str, StopMark] = {}
        for path in sorted(record_path(state_dir, "x").parent.glob("*.stop")):
            try:
                data = json.loads(path.read_text())
                out[path.stem] = cls(path.stem, int(data["pid"]), int(data["start"]), float(data["at"]),
                                     str(data["reason"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out

    @classmethod
    def clear(cls, state_dir: Path, job_ids: "set[str] | None" = None) -> None:
        """Remove the marks (of ``job_ids``, or all): recovery has recorded what they said."""
        for path in record_path(state_dir, "x").parent.glob("*.stop"):
            if job_ids is None or path.stem in job_ids:
                path.unlink(missing_ok=True)


def jobs_on_record(state_dir: Path) -> list[str]:
    """The jobs whose workers a past daemon wrote down (a spare's record names no job)."""
    folder = record_path(state_dir, "x").parent
    return sorted(p.stem for p in folder.glob("*.json") if not p.stem.startswith("spare-")) if folder.is_dir() else []


def shims_on_record(state_dir: Path) -> dict[tuple[int, int], str]:
    """The shims on this machine that past daemons wrote down, (pid, start time) -> the job whose
    worker each runs (``spare-…`` for a spare's): what ``peers.shim_owner`` looks for among a
    process's ancestors."""
    folder = record_path(state_dir, "x").parent
    out: dict[tuple[int, int], str] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record = ShimRecord.load(path)
        if record is not None and record.remote is None:
            out[(record.shim_pid, record.shim_start)] = path.stem
    return out


def stop_without_daemon(state_dir: Path, job_id: str, reason: str = REASON,
                        hosts: Mapping[str, HostSettings] | None = None) -> str:
    """End the worker of ``job_id`` that a past daemon left under its shim (on an SSH host: there, over
    a session of its own, the host found in ``hosts``); what was done, in words. Raises LookupError
    when no running worker of the job is on record."""
    record = ShimRecord.load(record_path(state_dir, job_id))
    if record is None:
        raise LookupError(f"no worker of job {job_id} is on record in {state_dir}")
    if record.remote is not None:
        return _stop_there(state_dir, job_id, record, reason, hosts or {})
    tree = record.tree
    proc = read_proc(tree.pid)
    if tree.boot != boot_id() or proc is None or proc.start != tree.start or proc.state in ("Z", "X"):
        # Its shim, if it runs, keeps how the worker exited for the next daemon: nothing to stop.
        raise LookupError(f"the worker of job {job_id} (pid {tree.pid}) is not running any more")
    StopMark(job_id, tree.pid, tree.start, time.time(), reason).save(state_dir)
    ended = asyncio.run(tree.end(grace=GRACE))
    record.kill()  # its exit has nobody to tell: the next daemon reads the mark
    if not ended:
        return f"{job_id}: sent SIGTERM and SIGKILL to the worker (pid {tree.pid}), but something of its tree still runs"
    return f"{job_id}: ended its worker (pid {tree.pid}) and its shim; the next daemon records it as stopped"


def _stop_there(state_dir: Path, job_id: str, record: ShimRecord, reason: str,
                hosts: Mapping[str, HostSettings]) -> str:
    """The worker of ``record`` is on an SSH host: the mark first (so that the next daemon ends it
    there and records the stop, whatever happens here), then its tree and its shim ended there."""
    assert record.remote is not None
    tree, name = record.tree, record.remote.host
    StopMark(job_id, tree.pid, tree.start, time.time(), reason).save(state_dir)
    later = "the next daemon ends it there and records it as stopped"
    host = hosts.get(name)
    if host is None or host.kind != "ssh":
        return f"{job_id}: its worker runs on host {name}, which is not an SSH host of the config; {later}"
    command = shlex.join([*record.remote.runner, "--signal", record.remote.tree, "0", "shim"])
    try:
        done = subprocess.run(one_off(host, command), capture_output=True, text=True, timeout=REACH_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{job_id}: cannot reach host {name} to end its worker ({exc}); {later}"
    if done.returncode != 0:
        why = last_line(done.stderr) or f"exit {done.returncode}"
        return f"{job_id}: cannot end its worker on host {name} ({why}); {later}"
    return f"{job_id}: ended its worker on host {name} (pid {tree.pid} there) and its shim; the next daemon records " \
           f"it as stopped"
