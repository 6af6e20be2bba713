"""Running git (and the worktree setup commands) as asyncio subprocesses: never on the event loop,
always under a timeout, their output kept for the message a person reads when one fails."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

#: Seconds one git command may take before it is killed.
GIT_TIMEOUT = 30.0
#: How much of a failed command's output a refusal quotes.
OUTPUT_TAIL = 4000
#: git never asks anyone anything, and speaks one language we can parse.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"}


class GitError(Exception):
    """A git command or a setup command failed; the message says which, and what it printed."""


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_TAIL else "…" + text[-OUTPUT_TAIL:]


async def _run(argv: list[str] | str, cwd: str | Path, timeout: float, env: dict[str, str] | None,
               shell: bool, stdin: bytes | None = None) -> Ran:
    """Run one command in its own session (so a timeout kills everything it started); ``stdin``
    is what it reads (user text goes there, never on a command line)."""
    full_env = {**os.environ, **(env or {})}
    feed = asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE
    if shell:
        proc = await asyncio.create_subprocess_shell(
            str(argv), cwd=cwd, env=full_env, stdin=feed, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    else:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=full_env, stdin=feed, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        _kill(proc)
        await proc.wait()
        raise
    return Ran(proc.returncode or 0, out.decode(errors="replace"), (err or b"").decode(errors="replace"))


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def git(*args: str, cwd: str | Path, timeout: float = GIT_TIMEOUT, check: bool = True,
              stdin: bytes | None = None, env: dict[str, str] | None = None) -> Ran:
    """``git ARGS`` in ``cwd``; GitError with git's own words when it fails (unless not ``check``).
    User text goes after ``--end-of-options`` in ``args``, or in ``stdin``."""
    try:
        ran = await _run(["git", *args], cwd, timeout, {**_GIT_ENV, **(env or {})}, shell=False, stdin=stdin)
    except asyncio.TimeoutError:
        raise GitError(f"git {args[0]} did not finish within {timeout:g}s") from None
    except OSError as exc:
        raise GitError(f"cannot run git in {cwd}: {exc.strerror or exc}") from None
    if check and not ran.ok:
        raise GitError(f"git {' '.join(args[:2])} failed: {tail(ran.err or ran.out)}")
    return ran


async def git_chunks(*args: str, cwd: str | Path, env: dict[str, str], limit: int,
                     timeout: float = GIT_TIMEOUT) -> AsyncIterator[bytes]:
    """``git ARGS``'s output as it comes, in chunks, never more than ``limit`` bytes (git is killed
    there), so a huge output is never held whole; GitError when git fails or runs out of time."""
    proc = await asyncio.create_subprocess_exec(
        "git", *args, cwd=cwd, env={**os.environ, **_GIT_ENV, **env}, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    errors = asyncio.ensure_future(_tail_of(proc.stderr))  # read alongside, so git never blocks on it
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    given, cut = 0, False
    try:
        while True:
            if given >= limit:
                cut = True
                _kill(proc)
                break
            chunk = await asyncio.wait_for(proc.stdout.read(min(1 << 20, limit - given)),
                                           max(deadline - loop.time(), 0.001))
            if not chunk:
                break
            given += len(chunk)
            yield chunk
        code = await asyncio.wait_for(proc.wait(), max(deadline - loop.time(), 0.001))
        err = await errors
    except asyncio.TimeoutError:
        raise GitError(f"git {_named(args)} did not finish within {timeout:g}s") from None
    finally:
        if proc.returncode is None:
            _kill(proc)
            await proc.wait()
        errors.cancel()
    if code != 0 and not cut:
        raise GitError(f"git {_named(args)} failed: {tail(err)}")


async def _tail_of(stream: asyncio.StreamReader) -> str:
    """What a stream says, up to its end; only its last OUTPUT_TAIL bytes are kept."""
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-OUTPUT_TAIL:]
    return kept.decode(errors="replace")


def _named(args: tuple[str, ...]) -> str:
    """The git command ``args`` runs (``diff`` of ``-c core.quotePath=false diff …``)."""
    return next((a for a in args if not a.startswith("-") and "=" not in a), "")


async def shell(command: str, cwd: str | Path, timeout: float, env: dict[str, str]) -> None:
    """One setup or teardown command (``sh -c``); GitError with its exit and output when it fails."""
    try:
        ran = await _run(command, cwd, timeout, env, shell=True)
    except asyncio.TimeoutError:
        raise GitError(f"`{command}` did not finish within {timeout:g}s") from None
    except OSError as exc:
        raise GitError(f"`{command}` could not run: {exc.strerror or exc}") from None
    if not ran.ok:
        raise GitError(f"`{command}` exited with code {ran.code}: {tail(ran.out) or '(no output)'}")
