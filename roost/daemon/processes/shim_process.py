"""Reaching a worker's shim (roost/programs/shim.py): starting one with its agent under a new
mark, or connecting to one a past daemon started (re-adoption), and writing down its record
(``ShimRecord``) for a later daemon. What comes out is a ``Process``: the worker running, its
link connected, nobody reading its lines yet; roost/daemon/processes/process.py reads them."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from roost.daemon.processes.shim_link import ShimError, ShimLink, ShimRecord, listen, shim_argv, token_hash
from roost.drivers.base import Launch
from roost.proctree import WorkerTree, boot_id, boot_ticks, read_proc

log = logging.getLogger(__name__)


@dataclass
class Process:
    """A worker running under its shim, connected, nobody reading its lines yet."""

    #: The worker's (the agent's) pid: what the job's record says.
    pid: int
    tree: WorkerTree
    record: ShimRecord
    link: ShimLink
    #: The shim, when this daemon started it (reaped by a thread of its own); None when adopted.
    shim: subprocess.Popen[bytes] | None = None
    #: A worker on an SSH host under a shim there (roost/daemon/processes/remote_worker.py): its
    #: record's socket is the host's path, nothing of this machine's.
    remote: bool = False

    @property
    def exited(self) -> "asyncio.Future[int]":
        return self.link.exited


Opener = Callable[[str, Launch], Awaitable[Process]]

#: Every shim of this daemon's workers, (pid, start time) -> the id of the job whose worker it runs
#: (``spare`` before a job takes it): a process below one of them is that job's, whatever its
#: environment says (roost/daemon/server/peers.py). Known from a shim's start, or from its record
#: before the daemon serves anyone (``know_shim``); a dead shim's entry goes at the next change.
SHIMS: dict[tuple[int, int], str] = {}


def know_shim(pid: int, start: int, job_id: str) -> None:
    """The shim ``pid`` (started at ``start``) runs job ``job_id``'s worker."""
    for key in [key for key in SHIMS if not _runs(*key)]:
        del SHIMS[key]
    SHIMS[(pid, start)] = job_id


def _runs(pid: int, start: int) -> bool:
    proc = read_proc(pid)
    return proc is not None and proc.start == start and proc.state not in ("Z", "X")


def socket_for(job_id: str, launch: Launch) -> Path:
    """Where the shim listens: beside the worker's record (state/workers/, 0700), or, for a worker
    written down nowhere (a test's own), in a private temporary directory."""
    if launch.record is not None:
        return launch.record.with_suffix(".sock")
    return Path(tempfile.mkdtemp(prefix="roost-shim-")) / f"{job_id}.sock"


async def open_process(job_id: str, launch: Launch, tail_env: dict[str, str] | None = None,
                       ephemeral: bool = False) -> Process:
    """Start ``launch`` under a shim with a new mark, the shim's record written at ``launch.record``.
    ``tail_env`` goes last in its environment (a spare's room for its job's variables). The shim
    outlives this daemon only once its record is written (``keep``): until then, and for good
    when it cannot be written or is ``ephemeral`` (a spare's, until a job takes it), it ends
    with this daemon. Raises OSError (a missing binary, a bad cwd) for the caller to report."""
    loop = asyncio.get_running_loop()
    floor, mark = boot_ticks(), WorkerTree.new_mark()
    path = socket_for(job_id, launch)
    sock = listen(path)
    try:
        # The agent's environment goes on the shim's stdin: the shim's own names no job (it is not the worker).
        shim = subprocess.Popen(shim_argv(sock, path, job_id, mark, launch.argv), cwd=launch.cwd,
                                env={}, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=[sock.fileno()],
                                start_new_session=True)
    finally:
        sock.close()
    proc = read_proc(shim.pid)
    shim_start = proc.start if proc else 0
    know_shim(shim.pid, shim_start, job_id)  # before its agent can say hello to anyone
    assert shim.stdin is not None
    try:
        with shim.stdin:
            shim.stdin.write(b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0"
                                      for k, v in {**launch.env, **(tail_env or {})}.items()))
    except BrokenPipeError:  # it died at once: its connection says why (or that nobody answered)
        pass
    reaped: asyncio.Future[int] = loop.create_future()
    threading.Thread(target=_reap, args=(shim, loop, reaped), name=f"reap-{shim.pid}", daemon=True).start()
    try:
        link = await ShimLink.connect(path)
    except (OSError, asyncio.TimeoutError) as exc:
        shim.kill()
        path.unlink(missing_ok=True)
        raise exc if isinstance(exc, ShimError) else ShimError(f"the worker's shim did not answer: {exc}") from None
    tree = WorkerTree(job=job_id, pid=link.worker_pid, start=link.worker_start, floor=floor, mark=mark, boot=boot_id())
    record = ShimRecord(tree, shim.pid, shim_start, str(path), token_hash(launch.env.get("ROOST_TOKEN", "")),
                        launch.adoptable)
    if launch.record is not None and save_record(record, launch.record) and not ephemeral:
        link.keep()
    return Process(link.worker_pid, tree, record, link, shim)


def adopt_opener(record: ShimRecord, committed: int) -> Opener:
    """An opener that takes over the running worker ``record`` names (a past daemon's) instead of
    starting one: its shim must still be the one started and name the same worker."""

    async def adopt(job_id: str, launch: Launch) -> Process:
        if not record.alive():
            raise ShimError("its shim is gone")
        link = await ShimLink.connect(Path(record.socket), committed)
        if (link.shim_pid, link.worker_pid, link.worker_start) != (record.shim_pid, record.tree.pid, record.tree.start):
            link.close()
            raise ShimError(f"its socket is answered by another worker ({link.worker_pid}, not {record.tree.pid})")
        return Process(link.worker_pid, record.tree, record, link)

    return adopt


def save_record(record: ShimRecord, path: Path) -> bool:
    """Write the shim's record down for a later daemon; a failure is logged (the worker runs, but
    ends with this daemon: nobody could find it after), and answered False."""
    try:
        record.save(path)
    except OSError as exc:
        log.warning("job %s: cannot write down its worker at %s (it ends with this daemon): %s",
                    record.tree.job, path, exc)
        return False
    return True


def _reap(proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, exited: "asyncio.Future[int]") -> None:
    """In a thread of its own: wait for this shim's pid only (no other child is reaped here)."""
    rc = proc.wait()
    try:
        loop.call_soon_threadsafe(lambda: exited.done() or exited.set_result(rc))
    except RuntimeError:
        pass  # the loop is gone: the daemon is exiting and nobody waits for this any more
