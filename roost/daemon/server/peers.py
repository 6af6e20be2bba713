"""Who the process at the other end of a connection is: a job's, the daemon's own, or maybe a
person (docs/protocols.md#authority).

The kernel gives the pid of the process that connected (``SO_PEERCRED``, Linux:
``socket_connect.peer_credentials``). That process is job J's when one of its ancestors is the shim
of J's worker (``shim_owner``: by pid and start time, from the shims the daemon started or found in
its records after a restart). Every shim is a child subreaper, so what a job's tree orphans (a double
fork, ``setsid -f``) is re-parented to its shim and stays below it: nothing a job can shed (its
environment, its token, its parent) makes its processes another's, or a person's. Besides, a process
is the daemon's own when the daemon is among its ancestors (workers, hooks, git, the ssh processes
that carry hosts' sockets), or when it carries a worker's mark (roost/proctree.py). A process that
cannot be read (gone already, or hiding its environment) is not taken for a person either.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from roost.proctree import MARK_VAR, Proc, read_proc

#: The most ancestors looked at; a chain longer than any real one means something is wrong.
MAX_DEPTH = 4096
_MARK = f"{MARK_VAR}=".encode()


def daemons_own(pid: int, daemon: int | None = None) -> str | None:
    """Why process ``pid`` is one the daemon (``daemon``, this process by default) started, so it
    cannot be a person; None when it is not."""
    daemon = os.getpid() if daemon is None else daemon
    proc = read_proc(pid) if pid > 0 else None
    if proc is None:
        return f"process {pid} is gone or cannot be read"
    if _descends(proc, daemon):
        return f"process {pid} descends from the daemon (pid {daemon})"
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return f"the environment of process {pid} cannot be read"
    if any(item.startswith(_MARK) for item in environ.split(b"\0")):
        return f"process {pid} carries a worker's mark ({MARK_VAR}): it left a worker's tree"
    return None


def shim_owner(pid: int, shims: Mapping[tuple[int, int], str]) -> str | None:
    """The job whose shim (``shims``: (pid, start time) -> job id) process ``pid`` runs below, or
    None when it is below none of them (or cannot be read)."""
    proc = read_proc(pid) if pid > 0 else None
    for _ in range(MAX_DEPTH):
        if proc is None:
            return None
        owner = shims.get((proc.pid, proc.start))
        if owner is not None:
            return owner
        if proc.ppid <= 1:
            return None
        parent = read_proc(proc.ppid)
        if parent is None:  # it exited between two reads: ``proc`` was re-parented (to its shim), read it again
            parent = read_proc(proc.pid)
        proc = parent
    return None


def _descends(proc: Proc, daemon: int) -> bool:
    """Whether the daemon is ``proc`` or one of its ancestors (a chain that breaks, or runs past
    MAX_DEPTH, counts as the daemon's: it cannot be shown not to be)."""
    for _ in range(MAX_DEPTH):
        if daemon in (proc.pid, proc.ppid):
            return True
        if proc.ppid <= 1:
            return False
        parent = read_proc(proc.ppid)
        if parent is None:  # it exited between two reads: ``proc`` was re-parented, read it again
            parent = read_proc(proc.pid)
            if parent is None:
                return True
        proc = parent
    return True
