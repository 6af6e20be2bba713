"""Running git (and the worktree setup commands) as asyncio subprocesses: never on the event loop,
always under a timeout, their output kept for the message a person reads when one fails."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from pathlib import Path

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
               shell: bool) -> Ran:
    """Run one command in its own session (so a timeout kills everything it started)."""
    full_env = {**os.environ, **(env or {})}
    if shell:
        proc = await asyncio.create_subprocess_shell(
            str(argv), cwd=cwd, env=full_env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    else:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=full_env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        raise
    return Ran(proc.returncode or 0, out.decode(errors="replace"), (err or b"").decode(errors="replace"))


async def git(*args: str, cwd: str | Path, timeout: float = GIT_TIMEOUT, check: bool = True) -> Ran:
    """``git ARGS`` in ``cwd``; GitError with git's own words when it fails (unless not ``check``)."""
    try:
        ran = await _run(["git", *args], cwd, timeout, _GIT_ENV, shell=False)
    except asyncio.TimeoutError:
        raise GitError(f"git {args[0]} did not finish within {timeout:g}s") from None
    except OSError as exc:
        raise GitError(f"cannot run git in {cwd}: {exc.strerror or exc}") from None
    if check and not ran.ok:
        raise GitError(f"git {' '.join(args[:2])} failed: {tail(ran.err or ran.out)}")
    return ran


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
