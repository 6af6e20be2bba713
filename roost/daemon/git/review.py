"""Reviewing a job's work: its diff against its base (made once per state, paged so no reply is
over MAX_FRAME) and merging its branch into its base when that is a fast-forward or a clean
merge (docs/worktrees.md)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.daemon.git.diffs import Source, read_page
from roost.daemon.git.run import GitError, git, tail
from roost.daemon.git.teardown import checked_out, gitdir, look, status
from roost.models import Job
from roost.protocol import ErrorCode, ProtocolError
from roost.rules.teardown import unsaved

if TYPE_CHECKING:
    from roost.daemon.supervisor import Supervisor


def _refused(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.REFUSED, message)


def _reviewable(sup: "Supervisor", job_id: str) -> Job:
    job = sup.index.require(job_id)
    if job.branch is None or job.repo is None:
        raise _refused(f"job {job.id} has no branch of its own (it was not spawned with --worktree, or its branch "
                       "was deleted with its worktree)")
    return job


async def _git(*args: str, cwd: str | Path, check: bool = True) -> str:
    try:
        return (await git(*args, cwd=cwd, check=check)).out
    except GitError as exc:
        raise _refused(str(exc)) from None


# -- diff -----------------------------------------------------------------------------------------------
async def diff(sup: "Supervisor", job_id: str, offset: int = 0, snapshot: str | None = None) -> dict[str, Any]:
    """The job's changes against where its branch left its base: committed and uncommitted, new
    files included. ``text`` is one page of the diff from byte ``offset``; ``next`` the next page's.
    git runs once per state of the worktree (diffs.py); ``snapshot`` pages one state's diff."""
    job = _reviewable(sup, job_id)
    snap = sup.diffs.get(snapshot) if snapshot else None
    if snap is None or snap.job != job.id:
        try:
            state, source = await _state(job)
            snap = await sup.diffs.snapshot(state, source)
        except GitError as exc:
            raise _refused(str(exc)) from None
        if snapshot and snap.id != snapshot:
            raise _refused(f"job {job.id}'s diff changed since its first page was read: read it again from offset 0")
    start, end, text = await asyncio.to_thread(read_page, snap, offset)
    return {"job": job.id, "branch": job.branch, "base": job.base, "files": snap.files, "files_more": snap.files_more,
            "size": snap.size, "cut": snap.cut, "snapshot": snap.id, "offset": start,
            "text": text.decode(errors="replace"), "next": end if end < snap.size else None}


async def _state(job: Job) -> tuple[str, Source]:
    """What the diff depends on, and where to make it: a live worktree's HEAD, its fork from the
    base and every changed or untracked file's name, size and mtime; else the branch's tip."""
    if job.worktree is not None and Path(job.worktree).is_dir():
        path = job.worktree
        head = (await git("rev-parse", "--verify", "HEAD", cwd=path)).out.strip()
        fork = (await git("merge-base", "--end-of-options", str(job.base), head, cwd=path)).out.strip()
        changed, untracked = await status(Path(path))
        stats = await asyncio.to_thread(_stats, Path(path), [*changed, *untracked])
        state = "\0".join([job.id, head, fork, *stats])
        return state, Source(job.id, path, (fork,), await gitdir(path) / "index")
    repo = str(job.repo)
    tip = (await git("rev-parse", "--verify", "--end-of-options", f"refs/heads/{job.branch}", cwd=repo)).out.strip()
    fork = (await git("merge-base", "--end-of-options", str(job.base), tip, cwd=repo)).out.strip()
    return "\0".join([job.id, fork, tip]), Source(job.id, repo, (fork, tip), None)


def _stats(path: Path, names: list[str]) -> list[str]:
    out = []
    for name in names:
        try:
            st = os.lstat(path / name)
            out.append(f"{name}\0{st.st_size}\0{st.st_mtime_ns}")
        except OSError:
            out.append(f"{name}\0gone")
    return out


# -- merge ------------------------------------------------------------------------------------------------
async def merge(sup: "Supervisor", job_id: str) -> dict[str, Any]:
    """Merge the job's branch into its base where the base is checked out (the main checkout),
    when that is a fast-forward or a merge without conflicts; refuse, saying what is in the way."""
    job = _reviewable(sup, job_id)
    repo, branch, base = str(job.repo), str(job.branch), str(job.base)
    if not (await git("show-ref", "--verify", "--quiet", "--end-of-options", f"refs/heads/{base}", cwd=repo,
                      check=False)).ok:
        raise _refused(f"its base {base} is not a branch (HEAD was detached at spawn, or the branch is gone): "
                       f"merge {branch} by hand")
    if job.worktree is not None:
        files = unsaved((await look(job)).facts)
        if files:
            raise _refused(f"job {job.id}'s worktree has uncommitted changes ({files}): "
                           "only commits merge; commit them first")
    target = await checked_out(repo, base)
    if target is None:
        raise _refused(f"{base} is not checked out in any worktree of {repo}: check it out there first")
    in_the_way = (await _git("status", "--porcelain", "--untracked-files=no", cwd=target)).splitlines()
    if in_the_way:
        raise _refused(f"{target} has uncommitted changes: {', '.join(l[3:] for l in in_the_way[:10])}")
    ahead = int((await _git("rev-list", "--count", "--end-of-options", f"{base}..{branch}", "--", cwd=repo)).strip())
    if ahead == 0:
        return {"job": job.id, "outcome": "up to date", "branch": branch, "base": base, "where": target}
    if (await git("merge-base", "--is-ancestor", "--end-of-options", base, branch, cwd=repo, check=False)).ok:
        await _git("merge", "--ff-only", "--end-of-options", branch, cwd=target)
        return {"job": job.id, "outcome": "fast-forward", "commits": ahead, "branch": branch, "base": base,
                "where": target}
    trial = await git("merge-tree", "--write-tree", "--name-only", "--no-messages", "--end-of-options", base, branch,
                      cwd=repo, check=False)
    if not trial.ok:
        conflicts = trial.out.splitlines()[1:]
        raise _refused(f"merging {branch} into {base} conflicts in {', '.join(conflicts[:20]) or tail(trial.err)}: "
                       "resolve it by hand")
    # The message holds the title (any size, any text): it goes in a file, never on the command line.
    with tempfile.NamedTemporaryFile("w", prefix="roost-merge-", suffix=".txt") as message:
        message.write(f"Merge {branch} (roost job {job.id}: {job.title})\n")
        message.flush()
        ran = await git("merge", "--no-ff", "--no-edit", "-F", message.name, "--end-of-options", branch, cwd=target,
                        check=False)
    if not ran.ok:
        await git("merge", "--abort", cwd=target, check=False)
        raise _refused(f"git merge refused: {tail(ran.out + ran.err)}")
    return {"job": job.id, "outcome": "merged", "commits": ahead, "branch": branch, "base": base, "where": target}
