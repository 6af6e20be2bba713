"""The built-in agent: a deterministic worker that reads each prompt as a script.

It needs no model and no network, so a new user sees roost work at once and tests drive every
state with it. It speaks the worker protocol (roost/worker_protocol.py) on stdin/stdout, reaches
the daemon as its job through the control socket, and keeps its conversation in its own session
file so a new process resumes where the last one stopped. docs/builtin-agent.md is the language.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from roost.client import AsyncClient, ClientError, job_identity
from roost.client.daemon_wait import DAEMON_WAIT, call_waiting_async, waited
from roost.paths import make_private_dir, open_private
from roost.programs.worker_process import WorkerProcess, options, run_spare
from roost.socket_connect import UNREACHABLE

#: Prompts that start with this are reports from children: noted, never run as a script.
REPORT_MARK = "<roost-report"
#: The label a spawn carries its own key in, so that one whose answer a restart of the daemon lost is
#: found among the children rather than made twice.
SPAWN_KEY = "roost.spawn"
#: States after which a child no longer holds up ``wait-children``.
_SETTLED = {"done", "failed", "stopped", "idle", "blocked"}
#: Seconds a ``run`` command may take before the turn fails.
RUN_TIMEOUT = 60.0
#: The directory ``wait-for NAME`` looks in for the file NAME (unset: the job's directory).
GATES_VAR = "ROOST_GATES"
#: Seconds between two looks for a gate's file: how late a released gate may be noticed.
GATE_POLL = 0.05
#: Longest gate name: one file name, and short enough to quote in an error whole.
GATE_NAME_MAX = 200


def split_task(task: str) -> str:
    """A spawn's task as the child's script: ``;`` separates lines, ``;;`` is a literal ``;``."""
    marker = "\0"
    parts = task.replace(";;", marker).split(";")
    return "\n".join(p.strip().replace(marker, ";") for p in parts if p.strip())


class TurnFailed(Exception):
    """A script line asked the turn to fail, or could not be carried out."""


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


class Session:
    """The conversation on disk, one JSON object a line; appended as it happens.

    Reading it back skips, and counts on stderr (the job's log), every line that is not one of
    the entries this agent writes: cut short by a crash, not UTF-8, not an object, or fields of
    the wrong type. The rest of the conversation is still good, so one bad line costs itself."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[dict[str, str]] = []
        #: The rest of the script after an ``ask``; None when no question is open.
        self.pending: list[str] | None = None
        if path.exists():
            self._load(path.read_bytes())

    def _load(self, data: bytes) -> None:
        skipped = []
        for number, line in enumerate(data.splitlines(), start=1):
            if line.strip() and not self._take(line):
                skipped.append(number)
        if skipped:
            shown = ", ".join(map(str, skipped[:10])) + (" …" if len(skipped) > 10 else "")
            print(f"roost-builtin-agent: skipped {len(skipped)} unreadable line{'s' if len(skipped) != 1 else ''} "
                  f"of {self.path} (line {shown})", file=sys.stderr, flush=True)

    def _take(self, line: bytes) -> bool:
        """Keep one session line; False when it is not an entry this agent wrote."""
        try:
            entry = json.loads(line.decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            return False
        if not isinstance(entry, dict):
            return False
        if entry.get("type") == "pending":
            lines = entry.get("lines")
            if lines is not None and not _is_strings(lines):
                return False
            self.pending = None if lines is None else list(lines)
            return True
        if entry.get("role") in ("user", "assistant") and isinstance(entry.get("text"), str):
            self.messages.append(entry)
            return True
        return False

    def _append(self, entry: dict[str, Any]) -> None:
        make_private_dir(self.path.parent)
        with os.fdopen(open_private(self.path), "a", encoding="utf-8") as fh:  # 0600 whatever the umask
            fh.write(json.dumps(entry) + "\n")

    def add(self, role: str, text: str) -> None:
        entry = {"role": role, "text": text}
        self.messages.append(entry)
        self._append(entry)

    def set_pending(self, lines: list[str] | None) -> None:
        self.pending = list(lines) if lines is not None else None
        self._append({"type": "pending", "lines": self.pending})


class BuiltinAgent(WorkerProcess):
    steer_refusal = None  # it takes notes while it works

    def __init__(self, session: Session, environ: dict[str, str]) -> None:
        super().__init__(session.path)
        self.session = session
        self.env = environ
        self.client: AsyncClient | None = None
        self.exit_after: float | None = None
        self.history: list[str] = []

    def say(self, text: str) -> None:
        self.session.add("assistant", text)
        self.emit({"type": "text", "text": text})

    # -- the daemon -----------------------------------------------------------------------
    async def connected(self, op: str) -> AsyncClient:
        """The connection to the daemon as this job, made at its first use (by ``op``) and again
        once the daemon has closed it (an idle one is: ``connection_idle_close``)."""
        if self.client is None or self.client.end_reason is not None:
            job, token = job_identity(self.env)
            socket_path = self.env.get("ROOST_SOCKET")
            if not socket_path:
                raise TurnFailed(f"{op}: no ROOST_SOCKET in the environment, so no daemon to ask")
            self.client = await AsyncClient.connect(Path(socket_path), client="builtin", job=job, token=token)
        return self.client

    async def fresh(self, op: str) -> AsyncClient:
        """The connection, made again when the daemon it was to went away (nothing was sent on it)."""
        client = await self.connected(op)
        if client.end_reason is not None:
            await self.drop()
            client = await self.connected(op)
        return client

    async def drop(self) -> None:
        """Let the connection go (its daemon is gone): the next call connects again."""
        client, self.client = self.client, None
        if client is not None:
            await client.close()

    async def daemon(self, op: str, **args: Any) -> Any:
        """One call as this job; while no daemon listens (it is restarting) it waits for the next one,
        at most DAEMON_WAIT seconds (roost/client/daemon_wait.py), instead of failing the turn."""
        return await call_waiting_async(lambda: self._call(op, args))

    async def _call(self, op: str, args: dict[str, Any]) -> Any:
        return await (await self.fresh(op)).call(op, **args)

    async def once(self, op: str, args: dict[str, Any]) -> Any:
        """A tool's call made exactly once across a restart of the daemon. One whose connection
        dropped after it was written may have been applied: a report is made again (the last one
        wins); a spawn carries a key of its own (the label SPAWN_KEY) and is first looked for among
        this job's children, and made again only if the daemon never took it."""
        if op == "spawn":
            args = {**args, "labels": {SPAWN_KEY: secrets.token_hex(8)}}
        start, lost = time.monotonic(), False
        while True:
            try:
                if lost and op == "spawn" and (row := await call_waiting_async(lambda: self._spawned(args["labels"]))):
                    return row
                return await self.daemon(op, **args)
            except ClientError as exc:
                if exc.code != "disconnected" or op not in ("spawn", "report") or time.monotonic() - start >= DAEMON_WAIT:
                    raise
                lost = True
                await self.drop()

    async def _spawned(self, labels: dict[str, str]) -> dict[str, Any] | None:
        async for page in (await self.fresh("spawn")).pages("children"):
            for row in page["rows"]:
                if (row.get("labels") or {}).get(SPAWN_KEY) == labels[SPAWN_KEY]:
                    return row
        return None

    async def tool(self, name: str, op: str, **args: Any) -> Any:
        """Call the daemon as a tool, with the call and its result on the transcript."""
        try:
            result = await self.once(op, args)
        except ClientError as exc:
            self.emit({"type": "tool", "name": name, "args": args, "result": exc.message, "error": True})
            raise TurnFailed(f"{name}: {exc.message}") from None
        summary = f"spawned {result['id']}" if op == "spawn" else result
        self.emit({"type": "tool", "name": name, "args": args, "result": summary, "error": False})
        return result

    # -- turns ----------------------------------------------------------------------------
    def steer(self, message: str) -> None:
        self.session.add("user", message)
        self.say(f"noted while working: {first_line(message)}")

    async def run_turn(self, run: Any, message: str) -> None:
        self.emit({"type": "turn_start", "run": run})
        self.history = [m["text"] for m in self.session.messages if m["role"] == "user"]
        self.session.add("user", message)
        try:
            outcome = await self.script(message)
        except asyncio.CancelledError:  # the daemon's "stopped by …" line says it: no echo of it here
            self.end_turn(run, "aborted")
            return
        except TurnFailed as exc:
            self.end_turn(run, "failed", error=str(exc))
        else:
            self.end_turn(run, **outcome)
        if self.exit_after is not None:
            asyncio.get_running_loop().call_later(self.exit_after, os._exit, 0)

    async def script(self, message: str) -> dict[str, Any]:
        if message.startswith(REPORT_MARK):  # reports never answer an open question
            count = message.count(REPORT_MARK)
            self.say(f"noted {count} report{'s' if count != 1 else ''} from subagents")
            return {"outcome": "ok"}
        if self.session.pending is not None:
            lines = self.session.pending
            self.session.set_pending(None)
            self.say(f"thanks, continuing with: {first_line(message)}")
        else:
            lines = message.splitlines()
        for index, raw in enumerate(lines):
            line = raw.strip()
            word, _, rest = line.partition(" ")
            rest = rest.strip()
            if not line:
                continue
            if word == "say":
                self.say(rest)
            elif word == "work":
                await asyncio.sleep(seconds(word, rest))
            elif word == "spawn" or word.startswith("spawn*"):
                count = spawn_count(word)
                for _ in range(count):
                    await self.tool("roost_spawn", "spawn", prompt=split_task(rest))
            elif word == "ask":
                self.session.set_pending(lines[index + 1:])
                self.say(rest)
                return {"outcome": "waiting", "question": rest}
            elif word == "report":
                status, _, text = rest.partition(" ")
                await self.tool("roost_report", "report", status=status, text=text)
            elif word == "fail":
                raise TurnFailed(rest or "failed as the script asked")
            elif word == "crash":
                os._exit(3)  # events are written straight to the descriptor: nothing is left unflushed
            elif word == "exit-after":
                self.exit_after = seconds(word, rest)
            elif word == "wait-children":
                await self.wait_children()
            elif word == "wait-for":
                await self.wait_for_gate(rest)
            elif word == "write":
                self.write(rest)
            elif word == "run":
                await self.run_command(rest)
            elif word == "ask-run":
                await self.ask_run(rest)
            elif word == "recall":
                self.say("earlier prompts: " + (" | ".join(first_line(t) for t in self.history) or "(none)"))
            else:
                self.say(line)
        return {"outcome": "ok"}

    def write(self, rest: str) -> None:
        """``write PATH TEXT``: TEXT and a newline become the file PATH (relative to the job's cwd)."""
        name, _, text = rest.partition(" ")
        if not name:
            raise TurnFailed("write: expected write PATH TEXT")
        path = Path(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise TurnFailed(f"write {name}: {exc.strerror or exc}") from None
        self.emit({"type": "tool", "name": "write", "args": {"path": name}, "result": f"{len(text) + 1} characters",
                   "error": False})

    async def run_command(self, command: str) -> None:
        """``run COMMAND``: a shell command in the job's cwd; its output is said, a failure fails the turn."""
        proc = await asyncio.create_subprocess_shell(command, stdin=asyncio.subprocess.DEVNULL,
                                                     stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise TurnFailed(f"run: `{command}` did not finish within {RUN_TIMEOUT:g}s") from None
        text = out.decode(errors="replace").rstrip()
        self.emit({"type": "tool", "name": "run", "args": {"command": command}, "result": f"exit {proc.returncode}",
                   "error": proc.returncode != 0})
        if proc.returncode:
            raise TurnFailed(f"run: `{command}` exited with code {proc.returncode}" + (f": {text}" if text else ""))
        if text:
            self.say(text)

    async def ask_run(self, command: str) -> None:
        """``ask-run COMMAND``: ask for permission to run COMMAND (an approval of the tool ``shell``),
        then run it as ``run`` does if allowed, or say why not; a denial does not fail the turn."""
        if not command:
            raise TurnFailed("ask-run: expected ask-run COMMAND")
        decision, reason = await self.ask_approval("shell", {"command": command, "cwd": os.getcwd()})
        if decision == "allow":
            await self.run_command(command)
            return
        self.emit({"type": "tool", "name": "ask-run", "args": {"command": command}, "result": f"denied: {reason}",
                   "error": True})
        self.say(f"not run: {command} (denied: {reason})")

    async def wait_for_gate(self, name: str) -> None:
        """``wait-for NAME``: hold the turn until the file NAME exists in the gates directory, so a
        test steps the script when it is ready instead of racing a ``work`` against the clock."""
        if not name or len(name) > GATE_NAME_MAX or "/" in name or "\0" in name or name in (".", ".."):
            raise TurnFailed(f"wait-for: expected a file name of 1 to {GATE_NAME_MAX} characters without '/', "
                             f"got {name[:GATE_NAME_MAX]!r}")
        gate = Path(self.env.get(GATES_VAR) or os.getcwd()) / name
        self.emit({"type": "tool", "name": "wait-for", "args": {"gate": name}, "result": "waiting", "error": False})
        while not gate.exists():  # a stop cancels the sleep: the turn ends as aborted
            await asyncio.sleep(GATE_POLL)

    async def wait_children(self) -> None:
        """Until every child has settled, reading them page by page (the first that has not ends
        a look, so a look at thousands of children reads only up to the first one still working).
        A look the daemon's restart cut short is taken again (it only reads), for DAEMON_WAIT at most."""
        lost: float | None = None
        while True:
            try:
                if await self._children_settled():
                    return
                lost = None
            except ClientError as exc:
                if exc.code not in (UNREACHABLE, "disconnected"):
                    raise
                await self.drop()
                lost = lost if lost is not None else time.monotonic()
                if time.monotonic() - lost >= DAEMON_WAIT:
                    raise waited(exc, time.monotonic() - lost) from None
            await asyncio.sleep(0.1)

    async def _children_settled(self) -> bool:
        async for page in (await self.fresh("wait-children")).pages("children"):
            if any(child["state"] not in _SETTLED for child in page["rows"]):
                return False
        return True

def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def seconds(word: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TurnFailed(f"{word}: expected a number of seconds, got {text!r}") from None
    if value < 0:
        raise TurnFailed(f"{word}: seconds cannot be negative ({text})")
    return value


def spawn_count(word: str) -> int:
    if word == "spawn":
        return 1
    try:
        count = int(word.partition("*")[2])
    except ValueError:
        raise TurnFailed(f"{word}: expected spawn*N with N a whole number") from None
    if count < 1:
        raise TurnFailed(f"{word}: N must be at least 1")
    return count


def main(argv: list[str] | None = None) -> None:
    if (sys.argv[1:] if argv is None else argv) == ["--spare"]:  # started ahead; a bind names the job
        run_spare(lambda session: BuiltinAgent(Session(session), dict(os.environ)))
        return
    args = options(argv, ("session",), "roost-builtin-agent")  # the session file, created when missing
    BuiltinAgent(Session(Path(args["session"])), dict(os.environ)).run()


if __name__ == "__main__":
    main()
