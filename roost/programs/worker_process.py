"""The worker side of the worker protocol, for roost's own Python workers (the built-in agent and
the command driver's worker): commands in on stdin, responses and events out on stdout, one turn
at a time, and every turn that starts ends exactly once — also when it is aborted before it began.
No line goes out over MAX_FRAME: text is cut into events of at most ENTRY_MAX bytes, anything else
that big becomes a note; a command line over the limit is answered with an error and skipped.
A spare (``run_spare``) is started before its job, which it takes from the daemon's ``bind``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import select
import sys
from pathlib import Path
from typing import Any, Callable

from roost.protocol import MAX_FRAME
from roost.worker_protocol import (DECISIONS, Oversize, approval, approval_withdrawn, encode_event, read_line, response,
                                   text_events, turn_end)

STDOUT = 1
#: Field of /proc/PID/stat where the environment block starts (the next is where it ends).
ENV_START = 50



def write_all(data: bytes) -> None:
    """All of ``data`` to stdout, in order, straight to the file descriptor. Through sys.stdout, a
    pipe the daemon was slow to empty lost the rest of a 64 KiB line under load (one line cut, the
    next event glued to it: a malformed line in the job's timeline, its text gone)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(STDOUT, view):]
        except BlockingIOError:  # should the descriptor ever be non-blocking: wait until it takes more
            select.select([], [STDOUT], [])

class WorkerProcess:
    """Subclasses give ``run_turn``; they may take steers and abort their own way."""

    #: What a refused steer says; None means steers are taken (``steer`` is overridden).
    steer_refusal: str | None = "this worker takes messages between turns only"

    def __init__(self, session_path: Path) -> None:
        self.session_path = session_path
        self.turn: asyncio.Task[None] | None = None
        self.turn_run: Any = None
        self.turn_ended = True
        #: The answers its approvals wait for, by its own approval id.
        self.approvals: dict[str, asyncio.Future[tuple[str, str]]] = {}
        self._approval_ids = itertools.count(1)

    @property
    def busy(self) -> bool:
        return self.turn is not None and not self.turn.done()

    def emit(self, event: dict[str, Any]) -> None:
        """Write an event or response to the daemon, a long text as several events."""
        events = [{**event, **e} for e in text_events(str(event.get("text", "")))] if event.get("type") == "text" \
            else [event]
        write_all(b"".join(encode_event(e) for e in events))

    def end_turn(self, run: Any, outcome: str, **fields: Any) -> None:
        self.turn_ended = True
        self.emit(turn_end(run, outcome, **fields))

    async def run_turn(self, run: Any, message: str) -> None:
        """Carry out one prompt, emitting events, and end it with ``end_turn``."""
        raise NotImplementedError

    async def ask_approval(self, tool: str, what: dict[str, Any]) -> tuple[str, str]:
        """Ask the daemon for permission and wait for its ``approval_answer``: (decision, reason). A turn
        cancelled meanwhile withdraws the request."""
        approval_id = f"b{next(self._approval_ids)}"
        waiting: asyncio.Future[tuple[str, str]] = asyncio.get_running_loop().create_future()
        self.approvals[approval_id] = waiting
        self.emit(approval(approval_id, tool, what))
        try:
            return await waiting
        finally:
            if not waiting.done():
                self.emit(approval_withdrawn(approval_id))
            self.approvals.pop(approval_id, None)

    def steer(self, message: str) -> None:
        """Take a note into the turn in flight (only called when ``steer_refusal`` is None)."""

    async def abort(self) -> None:
        """Cut the turn in flight short; idempotent. A turn cancelled before it began still ends."""
        if self.turn is not None and not self.turn.done():
            self.turn.cancel()
            try:
                await self.turn
            except asyncio.CancelledError:
                pass
        if not self.turn_ended:
            self.end_turn(self.turn_run, "aborted")

    async def handle(self, frame: dict[str, Any]) -> None:
        kind, req_id = frame.get("type"), frame.get("id")
        if kind == "get_state":
            self.emit(response(req_id, kind, True, {"session": str(self.session_path), "busy": self.busy}))
        elif kind == "prompt":
            if self.busy:
                self.emit(response(req_id, kind, False, error="a turn is running"))
                return
            self.emit(response(req_id, kind, True))
            self.turn_run, self.turn_ended = frame.get("run"), False
            self.turn = asyncio.create_task(self.run_turn(frame.get("run"), str(frame.get("message", ""))))
        elif kind == "steer":
            if self.steer_refusal is not None or not self.busy:
                self.emit(response(req_id, kind, False, error=self.steer_refusal or "no turn is running"))
                return
            self.emit(response(req_id, kind, True))
            self.steer(str(frame.get("message", "")))
        elif kind == "abort":
            await self.abort()
            self.emit(response(req_id, kind, True))
        elif kind == "approval_answer":
            waiting = self.approvals.get(str(frame.get("approval")))
            decision = frame.get("decision")
            if waiting is None or waiting.done() or decision not in DECISIONS:
                self.emit(response(req_id, kind, False, error=f"no pending approval {frame.get('approval')!r}"
                                   if decision in DECISIONS else f"decision must be allow or deny, not {decision!r}"))
                return
            waiting.set_result((str(decision), str(frame.get("reason") or "")))
            self.emit(response(req_id, kind, True))
        else:
            self.emit(response(req_id, str(kind), False, error=f"unknown command: {kind}"))

    def on_start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Set up process-level handlers before the first command (signals, say)."""

    def run(self) -> None:
        """Serve the daemon until it closes stdin (what a worker program's ``main`` calls)."""
        try:
            asyncio.run(self.main())
        except KeyboardInterrupt:
            pass

    async def main(self) -> None:
        await self.serve(await stdin_reader())

    async def serve(self, reader: asyncio.StreamReader) -> None:
        self.on_start(asyncio.get_running_loop())
        while (frame := await next_frame(reader)) is not None:
            await self.handle(frame)
        await self.abort()  # the daemon went away: nobody is left to answer to


def reply(event: dict[str, Any]) -> None:
    write_all(encode_event(event))


async def stdin_reader() -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=MAX_FRAME)
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def next_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The daemon's next command, or None once it closed stdin; a line that is not a JSON object
    (or is over MAX_FRAME) is answered with an error and skipped."""
    while True:
        line = await read_line(reader)
        if line is None:
            return None
        if isinstance(line, Oversize):
            reply(response(None, "parse", False, error=f"Skipped {line.describe()}"))
            continue
        try:
            frame = json.loads(line)
        except ValueError as exc:  # not JSON, or not UTF-8
            reply(response(None, "parse", False, error=f"Failed to parse command: {exc}"))
            continue
        if not isinstance(frame, dict):
            reply(response(None, "parse", False, error="Failed to parse command: not a JSON object"))
            continue
        return frame


# -- a spare: started ahead of its job ----------------------------------------------------------------
def run_spare(make: Callable[[Path], WorkerProcess]) -> None:
    """Run as a spare (roost/daemon/processes/spare.py): past the imports, wait for the daemon's ``bind``, take
    the job it names and go on as ``make(session)``, the worker a fresh launch would have been.
    Before that it answers get_state (it is ready) and refuses anything else."""
    try:
        asyncio.run(_spare(make))
    except KeyboardInterrupt:
        pass


async def _spare(make: Callable[[Path], WorkerProcess]) -> None:
    reader = await stdin_reader()
    while (frame := await next_frame(reader)) is not None:
        kind, req_id = frame.get("type"), frame.get("id")
        if kind == "bind":
            await make(take_job(frame)).serve(reader)
            return
        if kind == "get_state":
            reply(response(req_id, kind, True, {"session": None, "busy": False, "spare": True}))
        else:
            reply(response(req_id, str(kind), False, error=f"a spare worker has no job yet, so no {kind}"))


def take_job(frame: dict[str, Any]) -> Path:
    """Become the job's worker: its environment (``unset`` removed, ``env`` added), also in what
    /proc/self/environ shows; its working directory; the session file it returns. A bind that is
    not one ends the process saying what was wrong (on stderr: the job's log by now)."""
    session, cwd, env, unset = frame.get("session"), frame.get("cwd"), frame.get("env"), frame.get("unset", [])
    if not (isinstance(session, str) and isinstance(cwd, str) and _strings(env) and isinstance(unset, list)
            and all(isinstance(name, str) for name in unset)):
        raise SystemExit("roost worker: a bind command needs session and cwd (strings), env (a table of strings) "
                         f"and unset (a list of names); got {json.dumps(frame)[:500]}")
    for name in unset:
        os.environ.pop(name, None)
    os.environ.update(env)
    show_environ()
    if sys.path and sys.path[0] == os.getcwd():  # `-m` put the start directory first, as it would the job's
        sys.path[0] = cwd
    os.chdir(cwd)
    return Path(session)


def _strings(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def show_environ() -> None:
    """Write this process's environment over the block it started with, which /proc/self/environ
    (`ps e`, tools that find a worker by its variables) shows: in place, from the first byte that
    differs, the rest of the block NULs. Nothing when it does not fit or the kernel refuses; the
    environment itself (and what children inherit) is right either way."""
    try:
        stat = Path("/proc/self/stat").read_bytes()
        fields = stat[stat.rfind(b")") + 2:].split()
        start, end = int(fields[ENV_START - 3]), int(fields[ENV_START - 2])
        old = Path("/proc/self/environ").read_bytes()
    except (OSError, ValueError, IndexError):
        return
    new = b"".join(key + b"=" + value + b"\0" for key, value in os.environb.items())
    if len(new) > end - start:
        return
    same = len(os.path.commonprefix([old, new]))
    try:
        fd = os.open("/proc/self/mem", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.pwrite(fd, new[same:] + bytes(end - start - len(new)), start + same)
        finally:
            os.close(fd)
    except OSError:
        return


def options(argv: list[str] | None, names: tuple[str, ...], prog: str) -> dict[str, str]:
    """``--name value`` options, every one required. Not argparse: it loads gettext and adds a
    third to a worker's start-up, which every spawn waits for (docs/performance.md)."""
    args = sys.argv[1:] if argv is None else argv
    found: dict[str, str] = {}
    while args:
        flag, *rest = args
        name = flag[2:] if flag.startswith("--") else ""
        if name not in names or not rest:
            raise SystemExit(f"usage: {prog} " + " ".join(f"--{n} VALUE" for n in names) + f" (at {flag!r})")
        found[name], args = rest[0], rest[1:]
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"usage: {prog}: missing --{missing[0]}")
    return found
