"""One worker process: started in its own process group, its stdout read as events, its stderr
drained to the job's log, its exit reported once with the code or signal and the last stderr lines."""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import signal
from pathlib import Path
from typing import Any, Awaitable, Callable

from roost.drivers.base import Adapter, Launch
from roost.protocol import MAX_FRAME

EventHandler = Callable[[dict[str, Any]], None]
ExitHandler = Callable[[int, list[str]], Awaitable[None]]


def describe_exit(returncode: int) -> str:
    """'exited with code 3' or 'killed by SIGKILL', for the timeline."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"


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
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self.closing = False
        self.exited = asyncio.Event()
        self.returncode: int | None = None
        self._ids = itertools.count(1)
        self._waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stdout_done = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def start(self) -> None:
        """Start the process; raises OSError (missing binary, bad cwd) for the caller to report."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.launch.argv, cwd=self.launch.cwd, env=self.launch.env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=MAX_FRAME * 8)
        self.adapter.bind(self._dispatch, self._write)
        self._tasks = [asyncio.create_task(self._read_stdout()), asyncio.create_task(self._drain_stderr())]
        asyncio.create_task(self._wait_exit())

    async def _read_stdout(self) -> None:
        assert self.proc and self.proc.stdout
        while True:
            try:
                line = await self.proc.stdout.readline()
            except ValueError:  # a line over the limit: skip it, say so, keep reading
                self.on_event({"type": "malformed", "line": "(a line over the size limit)"})
                continue
            except (ConnectionError, OSError):
                break
            if not line:
                break
            for event in self.adapter.decode(line.rstrip(b"\n")):
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
        assert self.proc and self.proc.stderr
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            while True:
                line = await self.proc.stderr.readline()
                if not line:
                    break
                log.write(line)
                log.flush()
                text = line.decode(errors="replace").rstrip()
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
        """Send a command and wait for its response; raises TimeoutError or ConnectionError."""
        req_id = f"{kind[0]}{next(self._ids)}"
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[req_id] = fut
        self.send({"type": kind, "id": req_id, **fields})
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._waiters.pop(req_id, None)

    def send(self, command: dict[str, Any]) -> None:
        if self.proc is None or self.proc.stdin is None or self.proc.stdin.is_closing():
            raise ConnectionError("worker stdin is closed")
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
