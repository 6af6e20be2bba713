"""One worker process: started in its own process group, its stdout read as events, its stderr
drained to the job's log, its exit reported once with the code or signal and the last stderr lines.

Lines are bounded by MAX_FRAME both ways: a command that big is refused before it is written, and a
longer line on stdout is read to its end, skipped, and handed to the adapter as an ``Oversize``, which
turns it into a note for the timeline (and, for pi, into what the line must not take away)."""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import signal
from pathlib import Path
from typing import Any, Awaitable, Callable

from roost.drivers.base import Adapter, Launch
from roost.protocol import MAX_FRAME, encode
from roost.worker_protocol import Oversize, describe_exit, read_line, response

EventHandler = Callable[[dict[str, Any]], None]
ExitHandler = Callable[[int, list[str]], Awaitable[None]]


class CommandTooLarge(ValueError):
    """A command that would be a line over MAX_FRAME: the worker could not read it, so it is not sent."""


#: How many of the last stderr lines are kept to explain an exit, and how long each may be.
STDERR_TAIL = 20
STDERR_LINE = 1000


class Worker:
    def __init__(self, job_id: str, launch: Launch, adapter: Adapter, log_path: Path,
                 on_event: EventHandler, on_exit: ExitHandler) -> None:
        self.job_id = job_id
        self.launch = launch
        self.adapter = adapter
        self.log_path = log_path
        self.on_event = on_event
        self.on_exit = on_exit
        self.proc: asyncio.subprocess.Process | None = None
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
        """Start the process; raises OSError (missing binary, bad cwd) for the caller to report."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.launch.argv, cwd=self.launch.cwd, env=self.launch.env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=MAX_FRAME)
        self.adapter.bind(self._dispatch, self._write)
        self._tasks = [asyncio.create_task(self._read_stdout()), asyncio.create_task(self._drain_stderr())]
        self._exit_task = asyncio.create_task(self._wait_exit())

    async def _read_stdout(self) -> None:
        assert self.proc and self.proc.stdout
        while True:
            try:
                line = await read_line(self.proc.stdout)
            except (ConnectionError, OSError):
                break
            if line is None:
                break
            events = self.adapter.oversize(line) if isinstance(line, Oversize) else self.adapter.decode(line)
            for event in events:
                self._dispatch(event)
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
        if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.write(data)

    async def _drain_stderr(self) -> None:
        """Copy stderr to the job's log as it comes, in chunks (no line is too long for a log), and
        keep its last lines."""
        assert self.proc and self.proc.stderr
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        partial = b""
        with open(self.log_path, "ab") as log:
            while True:
                data = await self.proc.stderr.read(1 << 16)
                if not data:
                    break
                log.write(data)
                log.flush()
                *lines, partial = (partial + data).split(b"\n")
                partial = partial[-STDERR_LINE:]
                self._keep_stderr(lines)
        self._keep_stderr([partial])

    def _keep_stderr(self, lines: list[bytes]) -> None:
        for line in lines[-STDERR_TAIL:]:
            text = line[:STDERR_LINE].decode(errors="replace").rstrip()
            if text:
                self.stderr_tail.append(text)

    async def _wait_exit(self) -> None:
        assert self.proc
        rc = await self.proc.wait()
        # Let the readers finish so the last events and stderr lines are in before we report.
        await asyncio.wait(self._tasks, timeout=1.0)
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
        if self.proc is None or self.proc.stdin is None or self.proc.stdin.is_closing():
            raise ConnectionError("worker stdin is closed")
        size = len(encode(command))  # an adapter's frame holds no more than the command
        if size > MAX_FRAME:
            raise CommandTooLarge(f"a {command.get('type')} command of {size} bytes is over the {MAX_FRAME}-byte "
                             f"frame limit of the worker protocol")
        self.proc.stdin.write(self.adapter.encode(command))

    def _signal_group(self, sig: int) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def close(self, grace: float = 3.0) -> None:
        """Close on purpose: stdin first, then SIGTERM, then SIGKILL to the group, each after a wait."""
        self.closing = True
        if self.proc is None:
            return
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self._signal_group(sig)
            try:
                await asyncio.wait_for(self.exited.wait(), grace)
                return
            except asyncio.TimeoutError:
                continue

    def kill(self) -> None:
        """SIGKILL the whole process group now (daemon shutdown, a stop the worker ignored)."""
        self._signal_group(signal.SIGKILL)
