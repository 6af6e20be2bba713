"""One worker process, run under its shim (roost/programs/shim.py): the daemon starts the shim, the
shim starts the agent in a session of its own, and the two speak over a unix socket
(roost/daemon/processes/shim_link.py). The worker's stdout lines come with sequence numbers, which
the engine acknowledges once it has committed what they said (``ack``); its stderr is appended to
the job's log; its exit comes as the shim's word, with the last stderr lines.

Its exit is the worker's own, not its pipes': whatever is left of its tree (``WorkerTree``: its
session, its mark) is killed before the exit is reported. While it runs, the shim's record is
written down under the state directory (``Launch.record``), so a daemon started after this one
re-adopts the worker (``shim_process.adopt_opener``) or, when it cannot, kills what is left
(roost/daemon/storage/recovery.py). A daemon that stops leaves its shims running (``detach``).

Lines are bounded by MAX_FRAME both ways: a command that big is refused before it is written, and a
longer line on stdout is skipped by the shim and handed to the adapter as an ``Oversize``, which
turns it into a note for the timeline (and, for pi, into what the line must not take away)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import secrets
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import IO, Any, Awaitable, Callable

from roost.daemon.processes.shim_link import KEEP, Dropped, ShimLink
from roost.daemon.processes.shim_process import Opener, Process, open_process
from roost.drivers.base import Adapter, Launch
from roost.paths import make_private_dir, open_private
from roost.proctree import WorkerTree
from roost.protocol import MAX_FRAME, encode
from roost.worker_protocol import Oversize, describe_exit, note, response

#: Takes one step's events (a list; a test's worker may hand on one event alone).
EventHandler = Callable[[list[dict[str, Any]]], None]
ExitHandler = Callable[[int, list[str]], Awaitable[None]]


#: How many lines the reader takes from a worker before it lets the loop serve others.
YIELD_EVERY = 64

class CommandTooLarge(ValueError):
    """A command that would be a line over MAX_FRAME: the worker could not read it, so it is not sent."""


#: How many of the last stderr lines are kept to explain an exit, and how long each may be.
STDERR_TAIL = 20
STDERR_LINE = 1000
#: How long the readers may go on after the worker exited.
PIPE_GRACE = 1.0

log = logging.getLogger(__name__)


#: Commands a worker being reached may be sent before its shim answers (the engine sends one at a time).
EARLY_MAX = 16
#: The most seconds a close waits for a worker still being reached before it gives up on it.
OPEN_WAIT = 30.0


class Worker:
    def __init__(self, job_id: str, launch: Launch, adapter: Adapter, log_path: Path,
                 on_event: EventHandler, on_exit: ExitHandler, opener: "Opener | None" = None,
                 note_mark: str = "") -> None:
        self.job_id = job_id
        #: What starts a stderr line the job's egress proxy writes for its timeline (roost/sandbox/network.py).
        self.note_mark = note_mark.encode()
        self.open = opener or open_process
        self.launch = dataclasses.replace(launch, adoptable=adapter.survives_restart)
        self.adapter = adapter
        self.log_path = log_path
        self.on_event = on_event
        self.on_exit = on_exit
        self.process: Process | None = None
        self.tree: WorkerTree | None = None
        self._link: ShimLink | None = None
        self._log: IO[bytes] | None = None
        self._partial = b""
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.closing = False
        self.exited = asyncio.Event()
        self.returncode: int | None = None
        #: The sequence number of the stdout line being handed on (its events carry it: ``ack``).
        self.line_seq = 0
        #: The adapter's snapshot right after the step being handed on (its events carry it).
        self.adapter_state: dict[str, Any] | None = None
        #: While a line is decoded or a command encoded: what the adapter emits, handed on with the rest.
        self._gathered: list[dict[str, Any]] | None = None
        self._ids = itertools.count(1)
        #: Makes this handle's request ids its own: a re-adopted worker's shim replays what it said
        #: since the last commit, answers to a past daemon's requests among them (its own get_state
        #: at adoption, "not busy"), and a "g1" of this daemon's must not be answered by that one's
        #: (the prompt it wrote since would be taken for one never delivered, and sent again).
        self._id_tag = secrets.token_hex(4)
        #: Commands sent before the worker was reached (``send``), written once it is.
        self._early: list[dict[str, Any]] = []
        self._waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._exit_task: asyncio.Task[None] | None = None  # kept: asyncio holds tasks weakly
        self._stdout_done = False
        self.detached = False
        #: Set once ``start`` has reached the worker or failed to: a close asked while a re-adopted
        #: worker's shim is still being reached waits for it (else that worker outlived its close).
        self._opened: asyncio.Event | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def start(self) -> None:
        """Start the worker under its shim (or take a spare, or a past daemon's worker: ``open``);
        raises OSError (missing binary, bad cwd) for the caller to report."""
        self._opened = asyncio.Event()
        try:
            process = await self.open(self.job_id, self.launch)
        finally:
            self._opened.set()  # a waiting close resumes after this task's next lines, process set
        self.process, self.tree, self._link = process, process.tree, process.link
        process.link.on_stderr = self._on_stderr
        process.link.on_note = lambda text: self._emit(note(text))
        self.adapter.bind(self._emit, self._write)
        early, self._early = self._early, []
        for command in early:  # sent while its shim was being reached (a re-adopted worker)
            self._write_command(command)
        self._tasks = [asyncio.create_task(self._read_stdout(process.link))]
        self._exit_task = asyncio.create_task(self._wait_exit(process.exited))

    async def _read_stdout(self, link: ShimLink) -> None:
        read = 0
        while (item := await link.next_line()) is not None:
            self.line_seq, line = item
            if isinstance(line, Dropped):
                self._step([note(f"{line.size} bytes of the worker's output were dropped: its shim keeps the "
                                 f"newest {KEEP} bytes while no daemon takes them")])
            else:
                decode = self.adapter.oversize if isinstance(line, Oversize) else self.adapter.decode
                self._gather(lambda: decode(line))  # type: ignore[arg-type]
            read += 1
            if read % YIELD_EVERY == 0:  # a burst of buffered lines must not keep everyone else waiting
                await asyncio.sleep(0)
        self._stdout_done = True

    def _gather(self, step: Callable[[], Any]) -> Any:
        """Run one step of the adapter (decode a line, encode a command) and hand on together what it
        emitted meanwhile and what it returned (a list of events), as one step."""
        outer, self._gathered = self._gathered, []
        try:
            out = step()
        finally:
            gathered, self._gathered = self._gathered, outer
        self._step(gathered + (out if isinstance(out, list) else []))
        return out

    def _emit(self, event: dict[str, Any]) -> None:
        """An event the adapter says on its own: part of the step under way, or a step of its own (a timer's)."""
        if self._gathered is not None:
            self._gathered.append(event)
        else:
            self._step([event])

    def _step(self, events: list[dict[str, Any]]) -> None:
        """One step's events: a response goes to the request waiting for it; the rest to the daemon as
        one message, with the line's seq and the adapter's snapshot after the step, so the daemon
        commits the line whole or not at all (docs/reliability.md). Nothing after stdout ended: an
        adapter's late timer must not speak for a worker that is gone."""
        if self._stdout_done or self.detached:
            return
        rest = []
        for event in events:
            fut = self._waiters.pop(str(event.get("id")), None) if event.get("type") == "response" else None
            if fut is not None and not fut.done():
                fut.set_result(event)
            else:
                rest.append(event)
        if rest:
            self.adapter_state = self.adapter.snapshot()
            self.on_event(rest)

    def _write(self, data: bytes) -> None:
        """Bytes an adapter sends the agent on its own; dropped once stdin is closed."""
        if self._link is not None and not self._link.is_closing() and not self.closing:
            self._link.write(data)

    def _on_stderr(self, data: bytes) -> None:
        """Stderr to the job's log as it comes (no line is too long for a log), its last lines kept."""
        try:
            if self._log is None:
                make_private_dir(self.log_path.parent)
                self._log = os.fdopen(open_private(self.log_path), "ab")  # 0600 whatever the umask
            self._log.write(data)
            self._log.flush()
        except OSError as exc:
            log.warning("job %s: cannot write its worker's stderr to %s: %s", self.job_id, self.log_path, exc)
        *lines, partial = (self._partial + data).split(b"\n")
        self._partial = partial[-STDERR_LINE:]
        if self.note_mark:
            notes = [line for line in lines if line.startswith(self.note_mark)]
            for line in notes:
                self._emit(note(line[len(self.note_mark):STDERR_LINE].decode(errors="replace")))
            lines = [line for line in lines if not line.startswith(self.note_mark)] if notes else lines
        for line in lines[-STDERR_TAIL:]:
            text = line[:STDERR_LINE].decode(errors="replace").rstrip()
            if text:
                self.stderr_tail.append(text)

    async def _wait_exit(self, exited: "asyncio.Future[int]") -> None:
        rc = await exited
        # Let the reader finish so the last events are in before we report; then nothing of the
        # worker may stay behind it.
        await asyncio.wait(self._tasks, timeout=PIPE_GRACE)
        assert self.tree and self._link
        if not await self.tree.end(grace=0, session_known=True):
            log.error("job %s: processes of its worker %d are still alive after SIGKILL", self.job_id, self.tree.pid)
        if self._log is not None:
            self._log.close()
        self.returncode = rc
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"worker {describe_exit(rc)}"))
        self._waiters.clear()
        tail = self._link.exit_tail or list(self.stderr_tail)
        try:
            await self.on_exit(rc, self.adapter.exit_words(tail))
        finally:
            self.exited.set()

    def ack(self, seq: int) -> None:
        """What the worker said up to ``seq`` is committed: its shim may forget it."""
        if self._link is not None:
            self._link.ack(seq)

    def release(self) -> None:
        """Its exit is committed: the shim may end, and its record goes."""
        if self._link is not None:
            self._link.release()
        if self.launch.record is not None:
            self.launch.record.unlink(missing_ok=True)
        elif self.process is not None and not self.process.remote:  # a worker written down nowhere had a private directory for its socket
            shutil.rmtree(Path(self.process.record.socket).parent, ignore_errors=True)

    def detach(self) -> None:
        """The daemon stops and leaves this worker running under its shim, for the next daemon."""
        self.detached = True
        for task in [*self._tasks, self._exit_task]:
            if task is not None:
                task.cancel()
        if self._link is not None:
            self._link.close()
        if self._log is not None:
            self._log.close()

    async def request(self, kind: str, timeout: float, **fields: Any) -> dict[str, Any]:
        """Send a command and wait for its response; raises TimeoutError or ConnectionError. A command
        over the frame limit is not sent: its answer is a failed response that says so."""
        req_id = f"{kind[0]}{self._id_tag}-{next(self._ids)}"
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
        """Write one command; ConnectionError once stdin is closed, CommandTooLarge over MAX_FRAME. A
        worker being re-adopted is ready from the start (its slot is made as it was), but its shim is
        reached a moment later: what comes meanwhile is written once it is (``start``), in order."""
        opening = self._link is None and self.process is None and not self.closing
        if not opening and (self._link is None or self._link.is_closing() or self.closing):
            raise ConnectionError("worker stdin is closed")
        size = len(encode(command))  # an adapter's frame holds no more than the command
        if size > MAX_FRAME:
            raise CommandTooLarge(f"a {command.get('type')} command of {size} bytes is over the {MAX_FRAME}-byte "
                             f"frame limit of the worker protocol")
        if opening:
            if len(self._early) >= EARLY_MAX:
                raise ConnectionError(f"the worker is still being reached, with {EARLY_MAX} commands waiting")
            self._early.append(command)
            return
        self._write_command(command)

    def _write_command(self, command: dict[str, Any]) -> None:
        assert self._link is not None
        self._link.write(self._gather(lambda: self.adapter.encode(command)))

    def _signal_tree(self, sig: int) -> None:
        """Signal the worker and everything of its tree, also once the worker itself has exited
        (what it left may hold its pipes): until the exit is reported, something may be left."""
        if self.tree is not None and not self.exited.is_set():
            self.tree.signal(sig, session_known=True)

    async def close(self, grace: float = 3.0) -> None:
        """Close on purpose: stdin first, then SIGTERM, then SIGKILL to the tree, each after a wait.
        A worker still being reached (a re-adopted one: its slot is ready at once) is closed once it is."""
        if self.process is None and self._opened is not None:
            try:
                await asyncio.wait_for(self._opened.wait(), OPEN_WAIT)
            except asyncio.TimeoutError:
                pass
        if self.process is None:
            self.closing = True
            return
        if self._link is not None and not self.closing:
            self._link.close_stdin()
        self.closing = True
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
