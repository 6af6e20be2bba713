"""Forking a job: a new job that goes on from the source's conversation so far, the source untouched.

The driver says how the fork gets the conversation (roost/drivers: the agent's own fork at the
fork's first start, or a copy of the session file). With ``worktree``, the fork gets a worktree of
its own at the source's HEAD holding the source's uncommitted changes: tracked ones through
``git stash create`` (a commit object; the source's files, index and refs are not touched) applied
in the new worktree, untracked ones copied, at most FORK_FILES_MAX files and FORK_BYTES_MAX bytes.
The fork is made idle: it starts when it is given a message (``prompt``, or any later send).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from roost.config import ConfigError
from roost.daemon.git.run import GitError, git
from roost.daemon.storage.store import describe_failure
from roost.bounds import TITLE_MAX
from roost.daemon.supervisor import Supervisor, check_prompt
from roost.daemon.git import worktrees
from roost.drivers import driver_for
from roost.drivers.base import DriverError
from roost.models import Job, State
from roost.protocol import ErrorCode, ProtocolError

#: The most untracked files, and bytes of them, a fork's worktree takes from the source's.
FORK_FILES_MAX = 2000
FORK_BYTES_MAX = 256 * 1024 * 1024


def _refuse(code: ErrorCode, message: str) -> ProtocolError:
    return ProtocolError(code, f"fork: {message}")


async def fork(sup: Supervisor, job_id: str, caller: str | None, worktree: bool, title: str | None,
               prompt: str | None) -> dict[str, Any]:
    """Make the fork of ``job_id`` and give it ``prompt`` when there is one; its row."""
    source = sup.index.require(job_id)
    if source.archived_at is not None:
        raise _refuse(ErrorCode.ARCHIVED, f"job {source.id} is archived (unarchive it first)")
    if source.host:
        raise _refuse(ErrorCode.REFUSED, f"job {source.id} runs on host {source.host!r}; a fork is made on this "
                                         "machine only, from a session kept here")
    try:
        profile = sup.config.driver(source.driver)
    except ConfigError as exc:
        raise _refuse(ErrorCode.DRIVER, exc.message) from None
    parent = sup.index.get(caller) if caller is not None else (sup.index.get(source.parent) if source.parent else None)
    depth = parent.depth + 1 if parent else 0
    if depth > sup.config.max_depth:
        raise _refuse(ErrorCode.DEPTH, f"the fork would be depth {depth}, over max_depth = {sup.config.max_depth}")
    if prompt:
        check_prompt(prompt)
    if title is not None:
        title = " ".join(title.split())
        if not title or len(title) > TITLE_MAX:
            raise _refuse(ErrorCode.BAD_ARGS, f"a title is 1 to {TITLE_MAX} characters, not {len(title)}")
    now = sup.clock()
    job = Job(id=sup.new_id(), title=title or " ".join(f"fork of {source.title}".split())[:TITLE_MAX],
              driver=source.driver, cwd=source.cwd, parent=parent.id if parent else None, state=State.IDLE,
              state_since=now, created_at=now, updated_at=now, labels=dict(source.labels),
              lifetime=source.lifetime, depth=depth, driver_opts=source.driver_opts,
              approval_policy=list(source.approval_policy))
    try:
        job.session, job.fork_of = await asyncio.to_thread(
            driver_for(profile.kind).fork, source, sup.paths.sessions_dir, job.id)
    except DriverError as exc:
        raise _refuse(ErrorCode.DRIVER, str(exc)) from None
    except OSError as exc:
        raise _refuse(ErrorCode.STORE, f"could not copy job {source.id}'s session: {exc}") from None
    try:
        if worktree:
            await _worktree_with_changes(job, source, profile, sup)
        _save(sup, job, source, caller)
    except BaseException:  # no job came of it: the session copy made for it goes (never the source's)
        if job.session and job.session != source.session:
            Path(job.session).unlink(missing_ok=True)
        raise
    if prompt:
        await sup.send(job.id, prompt, caller)
    return sup.index.row(job.id)


def _save(sup: Supervisor, job: Job, source: Job, caller: str | None) -> None:
    """The fork's record and first entries, in one transaction; then the index has it."""
    eng = sup.engine
    try:
        with sup.store.transaction():
            sup.store.save_job(job)
            eng.timeline(job, "spawned", parent=job.parent, driver=job.driver, lifetime=job.lifetime,
                         by=caller or "person", forked_from=source.id)
            eng.timeline(job, "note", message=f"forked from job {source.id} ({source.title})")
    except (sqlite3.Error, OSError) as exc:
        raise ProtocolError(ErrorCode.STORE, describe_failure(exc, sup.store.path)) from None
    eng.changed(sup.index.add(job))


async def _worktree_with_changes(job: Job, source: Job, profile: Any, sup: Supervisor) -> None:
    """A worktree for ``job`` at the source's HEAD with the source's uncommitted changes in it."""
    try:
        head = (await git("rev-parse", "--verify", "HEAD", cwd=source.cwd)).out.strip()
        stash = (await git("stash", "create", cwd=source.cwd)).out.strip()
        top = (await git("rev-parse", "--show-toplevel", cwd=source.cwd)).out.strip()
        listed = (await git("ls-files", "--others", "--exclude-standard", "-z", cwd=top)).out
    except GitError as exc:
        raise _refuse(ErrorCode.REFUSED, f"job {source.id}'s directory is not a git checkout roost can fork "
                                         f"({exc})") from None
    untracked = [name for name in listed.split("\0") if name]
    if len(untracked) > FORK_FILES_MAX:
        raise _refuse(ErrorCode.REFUSED, f"job {source.id} has {len(untracked)} untracked files; a fork's "
                                         f"worktree takes at most {FORK_FILES_MAX} (commit or ignore some)")
    await worktrees.prepare(job, {"worktree": True, "base": head}, profile, sup.paths, sup.config)
    job.base = source.base or job.base  # it merges where the source merges
    assert job.worktree is not None
    try:
        if stash:
            await git("stash", "apply", "--index", stash, cwd=job.worktree)
        await asyncio.to_thread(_copy_untracked, Path(top), Path(job.worktree), untracked)
    except (GitError, OSError, ValueError) as exc:
        raise _refuse(ErrorCode.REFUSED, f"could not carry job {source.id}'s uncommitted changes into the fork's "
                                         f"worktree {job.worktree} (left there as it is): {exc}") from None


def _copy_untracked(src: Path, dst: Path, names: list[str]) -> None:
    """Copy untracked files (symlinks as links), at most FORK_BYTES_MAX bytes in all."""
    total = 0
    for name in names:
        path = src / name
        if not path.is_symlink():
            total += path.stat().st_size
        if total > FORK_BYTES_MAX:
            raise ValueError(f"the untracked files are over {FORK_BYTES_MAX} bytes (commit or ignore some)")
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            os.symlink(os.readlink(path), target)
        else:
            shutil.copy2(path, target)
