"""The ``[hooks]`` commands: what the daemon runs when a job starts to need someone, is done, or failed.

They run in the daemon, not the app, so they fire with no app open. The engine calls
:meth:`Hooks.job_changed` synchronously after each committed state change; everything after
that is a background process: at most ``hooks.max_running`` at once, the rest queued up to
:data:`QUEUE_MAX` (more are dropped), each under ``hooks.timeout`` (then its process group is
killed). A hook's failure goes to the daemon log and nowhere else: it is the user's script, not
the job, that went wrong.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any, Callable

from roost.config import Config
from roost.models import NEEDS_INPUT_STATES, State, record_json

log = logging.getLogger("roost.daemon")

#: The hook a new state fires (a state not listed fires none).
HOOK_FOR_STATE: dict[str, str] = {
    **{state.value: "job_needs_input" for state in NEEDS_INPUT_STATES},
    State.DONE.value: "job_done",
    State.FAILED.value: "job_failed",
}
#: Hook runs waiting for a free place; past this, new ones are dropped (and logged).
QUEUE_MAX = 100
#: How long :meth:`Hooks.close` lets running hooks finish before it kills them.
CLOSE_GRACE = 2.0


@dataclass(frozen=True)
class HookRun:
    """One hook to run: the command and timeout as the config said when the state changed."""

    event: str
    command: tuple[str, ...]
    timeout: float
    row: dict[str, Any]

    def describe(self) -> str:
        return f"hook {self.event} for job {self.row.get('id')} ({self.command[0]})"


def hook_environment(run: HookRun) -> dict[str, str]:
    """The daemon's environment plus the job, so a one-line hook needs no JSON parsing."""
    row = run.row
    env = dict(os.environ)
    env.pop("ROOST_TOKEN", None)  # a hook is not the job: it must not speak as it
    env.update(ROOST_HOOK=run.event, ROOST_JOB_ID=str(row.get("id", "")), ROOST_JOB_TITLE=str(row.get("title", "")),
               ROOST_JOB_STATE=str(row.get("state", "")), ROOST_JOB_REASON=str(row.get("reason") or ""),
               ROOST_JOB_PARENT=str(row.get("parent") or ""))
    return {k: v.replace("\0", "") for k, v in env.items()}  # a NUL in a title would make exec fail


class Hooks:
    """Decides which hook a state change fires and runs it in the background, bounded."""

    def __init__(self, config: Callable[[], Config], queue_max: int = QUEUE_MAX) -> None:
        self._config = config
        self._queue_max = queue_max
        self._queue: collections.deque[HookRun] = collections.deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._procs: set[asyncio.subprocess.Process] = set()
        self._closing = False

    def job_changed(self, row: dict[str, Any], old: str, new: str) -> None:
        """A job's state changed (committed). Never raises: a hook must not hurt the engine."""
        try:
            self._job_changed(row, str(old), str(new))
        except Exception:
            log.exception("hooks: job %s %s -> %s", row.get("id"), old, new)

    def _job_changed(self, row: dict[str, Any], old: str, new: str) -> None:
        event = HOOK_FOR_STATE.get(new)
        if event is None or event == HOOK_FOR_STATE.get(old) or self._closing:
            return  # waiting -> blocked still needs the same person: no second call
        settings = self._config().hooks
        command = settings.command(event)
        if command is None:
            return
        run = HookRun(event, command, settings.timeout, row)
        if len(self._queue) >= self._queue_max:
            log.warning("%s dropped: %d hooks already wait to run", run.describe(), len(self._queue))
            return
        self._queue.append(run)
        self._pump()

    def _pump(self) -> None:
        """Start queued runs while there is room (called on each new run and each finished one)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # outside the loop (recovery at start): they run at the next change
            return
        while self._queue and len(self._tasks) < self._config().hooks.max_running:
            task = loop.create_task(self._run(self._queue.popleft()))
            self._tasks.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("hooks: a run failed", exc_info=task.exception())
        if not self._closing:
            self._pump()

    async def _run(self, run: HookRun) -> None:
        cwd = run.row.get("cwd")
        try:  # its own session, so a timeout kills whatever it started too; stderr is the daemon log
            proc = await asyncio.create_subprocess_exec(
                *run.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                env=hook_environment(run), cwd=cwd if isinstance(cwd, str) and os.path.isdir(cwd) else None,
                start_new_session=True)
        except (OSError, ValueError) as exc:  # missing binary, not executable, a NUL in an argument
            log.warning("%s could not start: %s", run.describe(), getattr(exc, "strerror", None) or exc)
            return
        self._procs.add(proc)
        try:
            code = await asyncio.wait_for(self._feed_and_wait(proc, run.row), run.timeout)
        except asyncio.TimeoutError:
            _kill_group(proc)
            await proc.wait()
            log.warning("%s timed out after %gs and was killed", run.describe(), run.timeout)
            return
        finally:
            self._procs.discard(proc)
        if code != 0:
            log.warning("%s exited with %s", run.describe(), _exit_text(code))

    @staticmethod
    async def _feed_and_wait(proc: asyncio.subprocess.Process, row: dict[str, Any]) -> int:
        """Write the job as `roost show --json` gives it on the hook's stdin (it may not read it) and
        wait for it to exit."""
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(record_json(row), ensure_ascii=False).encode() + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it exited, or closed stdin, without reading: its choice
        finally:
            proc.stdin.close()
        return await proc.wait()

    async def close(self) -> None:
        """At shutdown: drop what waits, give running hooks a moment, then kill what is left."""
        self._closing = True
        if self._queue:
            log.warning("hooks: %d queued hook runs dropped at shutdown", len(self._queue))
            self._queue.clear()
        if not self._tasks:
            return
        _, left = await asyncio.wait(set(self._tasks), timeout=CLOSE_GRACE)
        if not left:
            return
        log.warning("hooks: killing %d hooks still running at shutdown", len(left))
        for proc in list(self._procs):
            _kill_group(proc)
        for task in left:
            task.cancel()
        await asyncio.wait(left)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _exit_text(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"
