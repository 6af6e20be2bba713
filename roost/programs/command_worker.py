"""The command driver's worker: runs a command-line agent once per prompt, in the worker protocol.

Each prompt runs the configured command line in the job's directory (the prompt in an argument or
on stdin; ``{session}`` is this job's stable session id; ``resume_args`` are added once the job has
had a turn, so the agent continues its own conversation). The command's stdout streams to the
transcript as text; exit code 0 ends the turn ok, anything else fails it with the code and the last
lines of stderr. The output goes out as it comes, in events of at most ENTRY_MAX, whole up to the
profile's ``max_output`` (roost/programs/turn_output.py). The session file is this worker's
transcript: its id, the prompts, the output in the same pieces as the events (so no line of it is
longer than one, whatever a turn printed) and each turn's exit, so a new worker resumes where the
last one stopped.

The turn is the command's: it ends when the command exits, whatever it left running. This worker
is a child subreaper, so what the command leaves (a background child, a double fork, a process in
a session of its own) stays in its tree; it reads the pipes a moment more (PIPE_GRACE), then kills
that tree and reaps it. An abort kills the tree too: SIGTERM, then SIGKILL after KILL_GRACE.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import IO, Any

from roost.bounds import MAX_OUTPUT
from roost.placeholders import substitute
from roost.proctree import MARK_VAR, WorkerTree, become_subreaper, read_proc
from roost.programs.turn_output import TurnOutput
from roost.programs.worker_process import WorkerProcess, options
from roost.protocol import MAX_FRAME
from roost.worker_protocol import describe_exit, note

#: How much of the command's stdout one read takes.
CHUNK = 64 * 1024
#: How long a command has to end after SIGTERM before SIGKILL.
KILL_GRACE = 2.0
#: How long to read the command's pipes after it exited (a child it left may hold them).
PIPE_GRACE = 1.0
#: How long what a command left behind has after SIGTERM before SIGKILL.
LEFTOVER_GRACE = 0.5
#: How long the output already in the pipes may take to go out once nothing is left to write more.
DRAIN_TIMEOUT = 30.0
STDERR_LINES = 5


class Children:
    """This worker's children: it is their subreaper and reaps every one (what it started and what
    was orphaned to it) on SIGCHLD, so none stays a zombie; the exit codes of the ones it started
    resolve their futures."""

    def __init__(self) -> None:
        self.waiting: dict[int, tuple[subprocess.Popen[bytes], asyncio.Future[int]]] = {}
        self.tree: WorkerTree | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        if not become_subreaper():
            print("roost-command-worker: cannot become a child subreaper; a process the command leaves in "
                  "a session of its own is found by its environment only", file=sys.stderr, flush=True)
        me = read_proc(os.getpid())
        assert me is not None
        self.tree = WorkerTree(job=os.environ.get("ROOST_JOB_ID", ""), pid=me.pid, start=me.start, floor=me.start,
                               mark=os.environ.get(MARK_VAR, ""), boot="")
        loop.add_signal_handler(signal.SIGCHLD, self.reap)

    def start(self, argv: list[str], stdin: IO[bytes] | int) -> tuple[subprocess.Popen[bytes], "asyncio.Future[int]"]:
        """Run ``argv`` in this session, in a process group of its own; OSError if it cannot run."""
        proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
        exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waiting[proc.pid] = (proc, exited)
        return proc, exited

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            proc, exited = self.waiting.pop(pid, (None, None))
            if proc is not None and exited is not None:
                proc.returncode = os.waitstatus_to_exitcode(status)
                if not exited.done():
                    exited.set_result(proc.returncode)

    async def end_all(self, grace: float) -> None:
        """End everything below this worker: SIGTERM, ``grace`` seconds, then SIGKILL until none is left."""
        if self.tree is not None:
            await self.tree.end(grace)

    def kill_all(self) -> None:
        if self.tree is not None:
            self.tree.signal(signal.SIGKILL)


class Transcript:
    """The session file, one JSON object a line: the session id first, then the prompts, each turn's
    command line, its output in pieces of at most ENTRY_MAX bytes and its exit. Read a line at a
    time, so a long history costs a resumed worker no more memory than its longest line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.id = ""
        self.turns = 0
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as lines:
                self._read(lines)
        if not self.id:
            self.id = str(uuid.uuid4())
            self.append({"type": "session", "id": self.id})

    def _read(self, lines: IO[str]) -> None:
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            if not isinstance(entry, dict):
                continue
            if entry.get("type") == "session":
                self.id = str(entry.get("id", ""))
            elif entry.get("type") == "turn":
                self.turns += 1

    def append(self, entry: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(entry) + "\n")


class CommandWorker(WorkerProcess):
    steer_refusal = "a command-line agent takes messages between turns only"

    def __init__(self, spec: dict[str, Any], transcript: Transcript) -> None:
        super().__init__(transcript.path)
        self.command: list[str] = list(spec["command"])
        self.resume_args: list[str] = list(spec.get("resume_args") or [])
        self.via_stdin = spec.get("prompt_via") == "stdin"
        self.max_output = int(spec.get("max_output", MAX_OUTPUT))
        self.transcript = transcript
        self.children = Children()
        self.aborted = False
        #: Why the session file took no more writes (a full disk), while it takes none.
        self.unwritable = ""

    def argv(self, prompt: str) -> list[str]:
        values = {"prompt": prompt, "session": self.transcript.id, "cwd": os.getcwd()}
        args = self.command + (self.resume_args if self.transcript.turns else [])
        return [substitute(arg, values) for arg in args]

    async def abort(self) -> None:
        """Kill the running command; its turn then ends by itself, as aborted."""
        if self.busy and self.turn is not None:
            self.aborted = True
            await self.kill()
            await asyncio.wait({self.turn})
        await super().abort()

    async def kill(self) -> None:
        """End the running command and everything it started, wherever it went."""
        await self.children.end_all(KILL_GRACE)

    def record(self, entry: dict[str, Any]) -> None:
        """Add to the session file. One that cannot be written (a full disk) costs the session file
        what it missed, said once in a note, never the turn: the output still reaches the daemon."""
        try:
            self.transcript.append(entry)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if reason != self.unwritable:
                self.emit(note(f"could not write the session file {self.transcript.path}: {reason}; the turn goes "
                               f"on, and the session file misses what it could not take"))
            self.unwritable = reason
        else:
            self.unwritable = ""

    # -- a turn -----------------------------------------------------------------------------------
    async def run_turn(self, run: Any, message: str) -> None:
        self.aborted = False
        self.emit({"type": "turn_start", "run": run})
        argv = self.argv(message)
        self.record({"role": "user", "text": message})
        stdin = self.prompt_input(message)
        try:
            proc, exited = self.children.start(argv, stdin)
        except OSError as exc:
            self.end_turn(run, "failed", error=f"cannot run {argv[0]}: {exc.strerror or exc}")
            return
        finally:
            if not isinstance(stdin, int):
                stdin.close()  # the command has its own copy
        self.record({"type": "turn", "argv": argv})
        self.transcript.turns += 1
        if self.aborted:  # the abort came while the command was starting
            await self.kill()
        output = TurnOutput(self.emit, lambda text: self.record({"role": "assistant", "text": text}), self.max_output)
        tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        stdout, stderr, pipes = await self.connect(proc)
        pumps = [asyncio.create_task(self.pump_stdout(stdout, output)), asyncio.create_task(self.pump_stderr(stderr, tail))]
        returncode = await exited
        _, late = await asyncio.wait(pumps, timeout=PIPE_GRACE)
        await self.children.end_all(LEFTOVER_GRACE)  # the turn is over: so is what it left running
        if late:  # nothing is left to write: what is in the pipes is all there is, however slow to send
            _, late = await asyncio.wait(late, timeout=DRAIN_TIMEOUT)
        for task in late:
            task.cancel()
        for transport in pipes:
            transport.close()
        output.close()
        self.record({"type": "exit", "code": returncode, "printed": output.total})
        if self.aborted:
            self.end_turn(run, "aborted")
        elif returncode == 0:
            self.end_turn(run, "ok")
        else:
            reason = f"{Path(argv[0]).name} {describe_exit(returncode)}"
            self.end_turn(run, "failed", error=reason + (": " + " | ".join(tail) if tail else ""))

    async def connect(self, proc: subprocess.Popen[bytes]) -> tuple[asyncio.StreamReader, asyncio.StreamReader,
                                                                    list[asyncio.BaseTransport]]:
        """The command's stdout and stderr as streams, and their transports (closed when the turn ends)."""
        loop = asyncio.get_running_loop()
        # stdout is read in chunks: its buffer pauses the pipe past 2 * CHUNK; stderr by lines
        readers = asyncio.StreamReader(limit=CHUNK), asyncio.StreamReader(limit=MAX_FRAME)
        transports = []
        for reader, pipe in zip(readers, (proc.stdout, proc.stderr)):
            transport, _ = await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)
            transports.append(transport)
        return readers[0], readers[1], transports

    def prompt_input(self, message: str) -> IO[bytes] | int:
        """The command's stdin: the prompt in an unlinked file (never a pipe that could fill up while
        the command does not read), or nothing."""
        if not self.via_stdin:
            return subprocess.DEVNULL
        data = tempfile.TemporaryFile()
        data.write(message.encode())
        data.seek(0)
        return data

    async def pump_stdout(self, stdout: asyncio.StreamReader, output: TurnOutput) -> None:
        """Stream stdout as text events: read as it comes, out when enough came or time is up."""
        loop = asyncio.get_running_loop()
        while True:
            wait = output.due(loop.time())
            if wait is not None and wait <= 0:
                output.quiet(loop.time())
                continue
            try:
                read = stdout.read(CHUNK)
                data = await (read if wait is None else asyncio.wait_for(read, wait))
            except asyncio.TimeoutError:
                continue
            if not data:
                break
            output.feed(data, loop.time())

    async def pump_stderr(self, stderr: asyncio.StreamReader, tail: collections.deque[str]) -> None:
        """The command's stderr goes to this worker's (the job's log); the last lines explain a failure."""
        while True:
            try:
                line = await stderr.readline()
            except ValueError:
                continue
            if not line:
                return
            sys.stderr.buffer.write(line)
            sys.stderr.flush()
            text = line.decode(errors="replace").strip()
            if text:
                tail.append(text)

    # -- the process ------------------------------------------------------------------------------
    def on_start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.children.install(loop)
        loop.add_signal_handler(signal.SIGTERM, self.terminate)

    def terminate(self) -> None:
        """SIGTERM: everything below this worker goes too, so no agent outlives it."""
        self.children.kill_all()
        raise SystemExit(128 + signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    args = options(argv, ("session", "spec"), "roost-command-worker")  # spec: JSON of command, resume_args, prompt_via
    CommandWorker(json.loads(args["spec"]), Transcript(Path(args["session"]))).run()


if __name__ == "__main__":
    main()
