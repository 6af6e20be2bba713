"""The command driver's worker: runs a command-line agent once per prompt, in the worker protocol.

Each prompt runs the configured command line in the job's directory (the prompt in an argument or
on stdin; ``{session}`` is this job's stable session id; ``resume_args`` are added once the job has
had a turn, so the agent continues its own conversation). The command's stdout streams to the
transcript as text; exit code 0 ends the turn ok, anything else fails it with the code and the last
lines of stderr. Big output is cut into events and bounded per turn (roost/programs/turn_output.py).
An abort kills the command's process group. The session file is this worker's
transcript: its id, the prompts, the output and each turn, so a new worker resumes where the last
one stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

from roost.config import substitute
from roost.programs.turn_output import TurnOutput
from roost.programs.worker_process import WorkerProcess
from roost.protocol import MAX_FRAME
from roost.worker_protocol import describe_exit

#: Output arriving within this many seconds of the last goes out in the same text event.
BURST = 0.05
#: How much of the command's stdout one read takes.
CHUNK = 64 * 1024
#: How long a command has to end after SIGTERM before SIGKILL.
KILL_GRACE = 2.0
#: How long to wait for the command's pipes after it exited (a child it left may hold them).
PIPE_GRACE = 1.0
STDERR_LINES = 5


class Transcript:
    """The session file, one JSON object a line: the session id first, then messages and turns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.id = ""
        self.turns = 0
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash
                if entry.get("type") == "session":
                    self.id = str(entry.get("id", ""))
                elif entry.get("type") == "turn":
                    self.turns += 1
        if not self.id:
            self.id = str(uuid.uuid4())
            self.append({"type": "session", "id": self.id})

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
        self.transcript = transcript
        self.proc: asyncio.subprocess.Process | None = None
        self.aborted = False

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
        """End the running command and everything it started: SIGTERM to its group, then SIGKILL."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            try:
                await asyncio.wait_for(proc.wait(), KILL_GRACE)
                return
            except asyncio.TimeoutError:
                continue

    # -- a turn -----------------------------------------------------------------------------------
    async def run_turn(self, run: Any, message: str) -> None:
        self.aborted = False
        self.emit({"type": "turn_start", "run": run})
        argv = self.argv(message)
        self.transcript.append({"role": "user", "text": message})
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if self.via_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
                limit=MAX_FRAME)
        except OSError as exc:
            self.end_turn(run, "failed", error=f"cannot run {argv[0]}: {exc.strerror or exc}")
            return
        proc = self.proc
        self.transcript.append({"type": "turn", "argv": argv})
        self.transcript.turns += 1
        if self.aborted:  # the abort came while the command was starting
            await self.kill()
        output = TurnOutput(self.emit)
        tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        pipes = [asyncio.create_task(self.pump_stdout(proc, output)), asyncio.create_task(self.pump_stderr(proc, tail))]
        if self.via_stdin:
            await self.feed(proc, message)
        returncode = await proc.wait()
        _, late = await asyncio.wait(pipes, timeout=PIPE_GRACE)
        for task in late:
            task.cancel()
        output.close()
        self.proc = None
        self.transcript.append({"role": "assistant", "text": "\n".join(output.texts), "exit": returncode})
        if self.aborted:
            self.end_turn(run, "aborted")
        elif returncode == 0:
            self.end_turn(run, "ok")
        else:
            reason = f"{Path(argv[0]).name} {describe_exit(returncode)}"
            self.end_turn(run, "failed", error=reason + (": " + " | ".join(tail) if tail else ""))

    async def feed(self, proc: asyncio.subprocess.Process, message: str) -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(message.encode())
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the command does not read its input: that is its business

    async def pump_stdout(self, proc: asyncio.subprocess.Process, output: TurnOutput) -> None:
        """Stream stdout as text events, what comes together as one."""
        assert proc.stdout is not None
        while True:
            try:
                read = proc.stdout.read(CHUNK)
                data = await (asyncio.wait_for(read, BURST) if output.waiting else read)
            except asyncio.TimeoutError:
                output.quiet()
                continue
            if not data:
                break
            output.feed(data)

    async def pump_stderr(self, proc: asyncio.subprocess.Process, tail: collections.deque[str]) -> None:
        """The command's stderr goes to this worker's (the job's log); the last lines explain a failure."""
        assert proc.stderr is not None
        while True:
            try:
                line = await proc.stderr.readline()
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
        loop.add_signal_handler(signal.SIGTERM, self.terminate)

    def terminate(self) -> None:
        """SIGTERM: the command's group goes too, so no agent outlives its worker."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        raise SystemExit(128 + signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="roost-command-worker", description=__doc__)
    parser.add_argument("--session", required=True, help="the session file (created when missing)")
    parser.add_argument("--spec", required=True, help="JSON: command, resume_args, prompt_via")
    args = parser.parse_args(argv)
    CommandWorker(json.loads(args.spec), Transcript(Path(args.session))).run()


if __name__ == "__main__":
    main()
