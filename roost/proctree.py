"""A worker's process tree, found and killed by identity, never by a pid alone (Linux /proc).

A pid is only a number the kernel hands out again; a process is a pid *and* its start time
(field 22 of /proc/PID/stat, in clock ticks since boot). ``WorkerTree`` names one worker that
way, plus what its descendants carry when they leave its tree: the mark (``MARK_VAR``, a random
value the daemon puts in the worker's environment, inherited by everything it starts, through
new sessions and double forks) and its session id. Everything here checks the start time
before each signal, so a recycled pid is never killed.

It is also written down (``save``, owner-only) while the worker runs, so a daemon started after a
SIGKILL of the last one can find and kill the old workers and their agents (``kill_tree_now``).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import secrets
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

#: The environment variable every process of a worker's tree inherits from the worker.
MARK_VAR = "ROOST_WORKER_MARK"
#: How often a kill loop looks again for what is left.
POLL = 0.02
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Proc:
    """One line of the process table: what /proc/PID/stat says."""

    pid: int
    ppid: int
    sid: int
    state: str
    start: int


def read_proc(pid: int) -> Proc | None:
    """The process now at ``pid``, or None when there is none (or /proc cannot say)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # the name in parentheses may hold anything
    return Proc(pid=pid, ppid=int(fields[1]), sid=int(fields[3]), state=fields[0].decode(), start=int(fields[19]))


def processes() -> dict[int, Proc]:
    """Every process /proc shows right now, by pid."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            proc = read_proc(int(entry.name))
            if proc is not None:
                out[proc.pid] = proc
    return out


def wakeups(pid: int) -> int:
    """How many times the process has gone to sleep and been woken, all its threads together
    (``voluntary_ctxt_switches``): a count a loaded machine does not raise, since being preempted
    is the other counter. Benchmarks and tests count an idle daemon's with it."""
    total = 0
    for task in os.scandir(f"/proc/{pid}/task"):
        try:
            status = Path(task.path, "status").read_text()
        except OSError:  # a thread that just ended
            continue
        total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("voluntary_ctxt"))
    return total


def boot_ticks() -> int:
    """Now, in the clock ticks since boot that start times are counted in (rounded down a tick)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return max(0, int(uptime * os.sysconf("SC_CLK_TCK")) - 1)


def boot_id() -> str:
    """This boot's id: start times from another boot mean nothing."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _carries(pid: int, entry: bytes) -> bool:
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def become_subreaper() -> bool:
    """Make this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER): what its descendants
    orphan (a double fork, a parent that exited) is re-parented to it instead of PID 1, so it can
    still find and kill them, and must reap them. False where the kernel or libc do not allow it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class WorkerTree:
    """One worker and everything it started, named so that no other process can be taken for it."""

    job: str
    pid: int
    #: The worker's own start time: the pid is the worker only while this matches.
    start: int
    #: Ticks before the worker started: nothing of its tree started earlier.
    floor: int
    mark: str
    boot: str

    @classmethod
    def of(cls, job: str, pid: int, floor: int, mark: str) -> "WorkerTree":
        proc = read_proc(pid)
        return cls(job=job, pid=pid, start=proc.start if proc else floor, floor=floor, mark=mark, boot=boot_id())

    @staticmethod
    def new_mark() -> str:
        return secrets.token_hex(12)

    def members(self, table: dict[int, Proc], session_known: bool = False) -> dict[int, int]:
        """The live (not zombie) processes of this tree, pid to start time, never this process: the
        worker while it is itself, its descendants, whatever carries the mark, and whatever is in
        its session — while the worker lives, or, with ``session_known``, when the caller has just
        seen it exit (later a new process may have taken the pid and made a session of its own). Never
        this process's ancestors either: a wrapper that started it (bwrap, for a job's walls) carries
        the mark and may have started within the same clock tick."""
        me = os.getpid()
        above = set()
        up = table.get(me)
        while up is not None and up.ppid not in above and len(above) < len(table):
            above.add(up.ppid)
            up = table.get(up.ppid)
        root = table.get(self.pid)
        alive = root is not None and root.start == self.start
        mark = f"{MARK_VAR}={self.mark}".encode()
        out: dict[int, int] = {}
        for proc in table.values():
            if proc.pid == me or proc.pid in above or proc.state in ("Z", "X") or proc.start < self.floor:
                continue
            if (alive and self._descends(proc, table)) or \
                    ((alive or session_known) and proc.sid == self.pid) or \
                    (self.mark and _carries(proc.pid, mark)):
                out[proc.pid] = proc.start
        return out

    def _descends(self, proc: Proc, table: dict[int, Proc]) -> bool:
        seen = 0
        while proc is not None and seen < len(table):
            if proc.pid == self.pid:
                return True
            proc = table.get(proc.ppid)  # type: ignore[assignment]
            seen += 1
        return False

    def signal(self, sig: int, session_known: bool = False) -> int:
        """Send ``sig`` to every live member; how many there were."""
        members = self.members(processes(), session_known)
        for pid, start in members.items():
            send(pid, start, sig)
        return len(members)

    async def end(self, grace: float, deadline: float = 5.0, session_known: bool = False) -> bool:
        """SIGTERM the tree, give it ``grace`` seconds, then SIGKILL what is left (again and again:
        a dying parent's children are found next round) until nothing is; False if something
        still lived after ``deadline`` more seconds."""
        if grace > 0 and self.signal(signal.SIGTERM, session_known):
            until = time.monotonic() + grace
            while time.monotonic() < until and self.members(processes(), session_known):
                await asyncio.sleep(POLL)
        until = time.monotonic() + deadline
        while self.signal(signal.SIGKILL, session_known):
            if time.monotonic() > until:
                return False
            await asyncio.sleep(POLL)
        return True

    def kill_now(self, deadline: float = 5.0) -> bool:
        """SIGKILL the tree and wait (blocking) until it is gone: for recovery, before the loop runs."""
        until = time.monotonic() + deadline
        while self.signal(signal.SIGKILL):
            if time.monotonic() > until:
                return False
            time.sleep(POLL)
        return True

    # -- the record a later daemon reads ------------------------------------------------------------
    def save(self, path: Path) -> None:
        """Write this tree down owner-only (0600 from creation), replacing any older record."""
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(self), fh)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "WorkerTree | None":
        """The record at ``path``; None when there is none or it cannot be read as one."""
        try:
            data = json.loads(path.read_text())
            return cls(job=str(data["job"]), pid=int(data["pid"]), start=int(data["start"]),
                       floor=int(data["floor"]), mark=str(data["mark"]), boot=str(data["boot"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def send(pid: int, start: int, sig: int) -> None:
    """Signal ``pid`` only if it is still the process that started at ``start``. A pidfd, opened
    before the check, pins the process: the signal cannot reach one that took the pid since."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (OSError, AttributeError):  # no pidfds (an old kernel): check, then signal by pid
        proc = read_proc(pid)
        if proc is not None and proc.start == start:
            _quiet(lambda: os.kill(pid, sig))
        return
    try:
        proc = read_proc(pid)
        if proc is not None and proc.start == start:
            _quiet(lambda: signal.pidfd_send_signal(fd, sig))
    finally:
        os.close(fd)


def _quiet(act: Callable[[], None]) -> None:
    try:
        act()
    except (ProcessLookupError, PermissionError):
        pass


def record_path(state_dir: Path, job_id: str) -> Path:
    """Where the daemon keeps the record of a job's running worker tree."""
    return state_dir / "workers" / f"{job_id}.json"
