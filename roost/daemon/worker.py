"""One worker process: started in a session of its own, its stdout read as events, its stderr
drained to the job's log, its exit reported once with the code or signal and the last stderr lines.

Its exit is the worker's own, not its pipes': a child the worker left may hold them open, so once
the worker is reaped its readers get PIPE_GRACE to finish, and then whatever is left of its tree
(``roost.proctree.WorkerTree``: its session, its mark) is killed before the exit is reported. While
it runs, the tree is written down under the state directory (``Launch.record``) so a daemon started
after a SIGKILL of this one can kill what it left (roost/daemon/recovery.py).

Lines are bounded by MAX_FRAME both ways: a command that big is refused before it is written, and a
longer line on stdout is read to its end, skipped, and handed to the adapter as an ``Oversize``, which
turns it into a note for the timeline (and, for pi, into what the line must not take away)."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from roost.drivers.base import Adapter, Launch
from roost.paths import make_private_dir, open_private
from roost.proctree import MARK_VAR, WorkerTree, boot_ticks
from roost.protocol import MAX_FRAME, encode
from roost.worker_protocol import Oversize, describe_exit, read_line, response

EventHandler = Callable[[dict[str, Any]], None]
ExitHandler = Callable[[int, list[str]], Awaitable[None]]


#: How many lines the reader takes from a worker before it lets the loop serve others.
YIELD_EVERY = 64

class CommandTooLarge(ValueError):
    """A command that would be a line over MAX_FRAME: the worker could not read it, so it is not sent."""


#: How many of the last stderr lines are kept to explain an exit, and how long each may be.
STDERR_TAIL = 20
STDERR_LINE = 1000
#: How long the readers may go on after the worker exited (a child it left may hold the pipes).
PIPE_GRACE = 1.0

log = logging.getLogger(__name__)


@dataclass
class Process:
    """A started worker process, its pipes connected to the loop and nobody reading them yet."""

    proc: subprocess.Popen[bytes]
    tree: WorkerTree
    stdin: asyncio.WriteTransport
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    pipes: list[asyncio.BaseTransport]
    #: The process's exit code once it is reaped (by a thread of its own).
    exited: "asyncio.Future[int]"


Opener = Callable[[str, Launch], Awaitable[Process]]


async def open_process(job_id: str, launch: Launch, tail_env: dict[str, str] | None = None) -> Process:
    """Start ``launch`` in a session of its own with a new mark, its tree written down at
    ``launch.record``. Not asyncio's subprocess: its wait() also waits for the pipes, which a left
    child holds. ``tail_env`` goes last in its environment (a spare's room for its job's variables)."""
    loop = asyncio.get_running_loop()
    floor, mark = boot_ticks(), WorkerTree.new_mark()
    proc = subprocess.Popen(
        launch.argv, cwd=launch.cwd, env={**launch.env, MARK_VAR: mark, **(tail_env or {})},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    tree = WorkerTree.of(job_id, proc.pid, floor, mark)
    if launch.record is not None:
        save_tree(tree, launch.record)
    exited: asyncio.Future[int] = loop.create_future()
    threading.Thread(target=_reap, args=(proc, loop, exited), name=f"reap-{proc.pid}", daemon=True).start()
    stdout, stderr = asyncio.StreamReader(limit=MAX_FRAME), asyncio.StreamReader(limit=MAX_FRAME)
    stdin, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, proc.stdin)
    pipes = []
    for reader, pipe in ((stdout, proc.stdout), (stderr, proc.stderr)):
        transport, _ = await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)
        pipes.append(transport)
    return Process(proc, tree, stdin, stdout, stderr, pipes, exited)  # type: ignore[arg-type]


def save_tree(tree: WorkerTree, path: Path) -> None:
    """Write the tree down for a later daemon's recovery; a failure is logged, the worker runs."""
    try:
        tree.save(path)
    except OSError as exc:  # the worker runs; only a later daemon's recovery cannot see it
        log.warning("job %s: cannot write down its worker tree at %s: %s", tree.job, path, exc)


def _reap(proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, exited: "asyncio.Future[int]") -> None:
    """In a thread of its own: wait for this worker's pid only (no other child is reaped here)."""
    rc = proc.wait()
    try:
        loop.call_soon_threadsafe(lambda: exited.done() or exited.set_result(rc))
    except RuntimeError:
        pass  # the loop is gone: the daemon is exiting and nobody waits for this any more


class Worker:
    def __init__(self, job_id: str, launch: Launch, adapter: Adapter, log_path: Path,
                 on_event: EventHandler, on_exit: ExitHandler, opener: "Opener | None" = None) -> None:
        self.job_id = job_id
        self.open = opener or open_process
        self.launch = launch
        self.adapter = adapter
        self.log_path = log_path
        self.on_event = on_event
        self.on_exit = on_exit
        self.proc: subprocess.Popen[bytes] | None = None
        self.tree: WorkerTree | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._pipes: list[asyncio.BaseTransport] = []
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.closing = False
        self.exited = asyncio.Event()
        self.returncode: int | None = None
        self._ids = itertools.count(1)
        self._waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._exit_task: asyncio.Task[None] | None = None  # kept: asyncio holds tasks weakly
        self._stdout_done = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def start(self) -> None:
        """Start the process (or take a spare for it: ``open``); raises OSError (missing binary, bad
        cwd) for the caller to report."""
        process = await self.open(self.job_id, self.launch)
        self.proc, self.tree, self._stdin, self._pipes = process.proc, process.tree, process.stdin, process.pipes
        self.adapter.bind(self._dispatch, self._write)
        self._tasks = [asyncio.create_task(self._read_stdout(process.stdout)),
                       asyncio.create_task(self._drain_stderr(process.stderr))]
        self._exit_task = asyncio.create_task(self._wait_exit(process.exited))

    async def _read_stdout(self, stdout: asyncio.StreamReader) -> None:
        read = 0
        while True:
            try:
                line = await read_line(stdout)
            except (ConnectionError, OSError):
                break
            if line is None:
                break
            events = self.adapter.oversize(line) if isinstance(line, Oversize) else self.adapter.decode(line)
            for event in events:
                self._dispatch(event)
            read += 1
            if read % YIELD_EVERY == 0:  # a burst of buffered lines must not keep everyone else waiting
                await asyncio.sleep(0)
        self._stdout_done = True

    def _dispatch(self, event: dict[str, Any]) -> None:
        """A response goes to the request waiting for it; anything else to the daemon. Nothing
        after stdout ended: an adapter's late timer must not speak for a worker that is gone."""
        if self._stdout_done:
            return
        if event.get("type") == "response":
            fut = self._waiters.pop(str(event.get("id")), None)
            if fut is not None and not fut.done():
                fut.set_result(event)
                return
        self.on_event(event)

    def _write(self, data: bytes) -> None:
        """Bytes an adapter sends the agent on its own; dropped once stdin is closed."""
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.write(data)

    async def _drain_stderr(self, stderr: asyncio.StreamReader) -> None:
        """Copy stderr to the job's log as it comes, in chunks (no line is too long for a log), and
        keep its last lines."""
        make_private_dir(self.log_path.parent)
        partial = b""
        with os.fdopen(open_private(self.log_path), "ab") as log_file:  # 0600 whatever the umask
            while True:
                data = await stderr.read(1 << 16)
                if not data:
                    break
                log_file.write(data)
                log_file.flush()
                *lines, partial = (partial + data).split(b"\n")
                partial = partial[-STDERR_LINE:]
                self._keep_stderr(lines)
        self._keep_stderr([partial])

    def _keep_stderr(self, lines: list[bytes]) -> None:
        for line in lines[-STDERR_TAIL:]:
            text = line[:STDERR_LINE].decode(errors="replace").rstrip()
            if text:
                self.stderr_tail.append(text)

    async def _wait_exit(self, exited: "asyncio.Future[int]") -> None:
        rc = await exited
        # Let the readers finish so the last events and stderr lines are in before we report; then
        # nothing of the worker may stay behind it, and no pipe is left for a straggler to hold.
        _, late = await asyncio.wait(self._tasks, timeout=PIPE_GRACE)
        assert self.tree
        if not await self.tree.end(grace=0, session_known=True):
            log.error("job %s: processes of its worker %d are still alive after SIGKILL", self.job_id, self.tree.pid)
        if late:  # the pipes' writers are gone: what is left in them is read at once
            await asyncio.wait(late, timeout=PIPE_GRACE)
        for transport in [*self._pipes, self._stdin]:
            if transport is not None:
                transport.close()
        if self.launch.record is not None:
            self.launch.record.unlink(missing_ok=True)
        self.returncode = rc
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"worker {describe_exit(rc)}"))
        self._waiters.clear()
        try:
            await self.on_exit(rc, list(self.stderr_tail)[-5:])
        finally:
            self.exited.set()

    async def request(self, kind: str, timeout: float, **fields: Any) -> dict[str, Any]:
        """Send a command and wait for its response; raises TimeoutError or ConnectionError. A command
        over the frame limit is not sent: its answer is a failed response that says so."""
        req_id = f"{kind[0]}{next(self._ids)}"
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[req_id] = fut  # before sending: an adapter may answer while it encodes
        try:
            self.send({"type": kind, "id": req_id, **fields})
            return await asyncio.wait_for(fut, timeout)
        except CommandTooLarge as exc:
            return response(req_id, kind, False, error=str(exc))
        finally:
            self._waiters.pop(req_id, None)

    def send(self, command: dict[str, Any]) -> None:
        """Write one command; ConnectionError once stdin is closed, CommandTooLarge over MAX_FRAME."""
        if self._stdin is None or self._stdin.is_closing():
            raise ConnectionError("worker stdin is closed")
        size = len(encode(command))  # an adapter's frame holds no more than the command
        if size > MAX_FRAME:
            raise CommandTooLarge(f"a {command.get('type')} command of {size} bytes is over the {MAX_FRAME}-byte "
                             f"frame limit of the worker protocol")
        self._stdin.write(self.adapter.encode(command))

    def _signal_tree(self, sig: int) -> None:
        """Signal the worker and everything of its tree, also once the worker itself has exited
        (what it left may hold the pipes): until the exit is reported, something may be left."""
        if self.tree is not None and not self.exited.is_set():
            self.tree.signal(sig, session_known=True)

    async def close(self, grace: float = 3.0) -> None:
        """Close on purpose: stdin first, then SIGTERM, then SIGKILL to the tree, each after a wait."""
        self.closing = True
        if self.proc is None:
            return
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self._signal_tree(sig)
            try:
                await asyncio.wait_for(self.exited.wait(), grace)
                return
            except asyncio.TimeoutError:
                continue

    def kill(self) -> None:
        """SIGKILL the whole tree now (a worker that did not answer, a stop the worker ignored)."""
        self._signal_tree(signal.SIGKILL)
