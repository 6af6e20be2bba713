"""Reviewing a job's work: its diff against its base (paged, so no reply is over MAX_FRAME) and
merging its branch into its base when that is a fast-forward or a clean merge (docs/worktrees.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.daemon.gitrun import GitError, git, tail
from roost.daemon.worktrees import look
from roost.models import Job
from roost.protocol import ErrorCode, ProtocolError

if TYPE_CHECKING:
    from roost.daemon.supervisor import Supervisor

#: Bytes of diff text one reply carries. JSON escaping can make text up to six times longer
#: (control characters), so this stays far enough under MAX_FRAME whatever the diff holds.
DIFF_PAGE = 128 * 1024
#: The most changed files one reply lists.
FILES_MAX = 2000


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
async def diff(sup: "Supervisor", job_id: str, offset: int = 0) -> dict[str, Any]:
    """The job's changes against where its branch left its base: committed and uncommitted, new
    files included. ``text`` is one page of the diff from byte ``offset``; ``next`` the next page's."""
    job = _reviewable(sup, job_id)
    live = job.worktree is not None and Path(job.worktree).is_dir()
    where = job.worktree if live else job.repo
    assert where is not None
    tip = "HEAD" if live else str(job.branch)
    fork = (await _git("merge-base", str(job.base), tip, cwd=where)).strip()
    against = [fork] if live else [fork, tip]
    numstat = await _git("diff", "--numstat", *against, cwd=where)
    text = await _git("diff", *against, cwd=where)
    files = [_numstat(line) for line in numstat.splitlines() if line.strip()]
    if live:
        for name in (await _git("ls-files", "--others", "--exclude-standard", cwd=where)).splitlines():
            counts = await _git("diff", "--no-index", "--numstat", "--", "/dev/null", name, cwd=where, check=False)
            files.extend({**_numstat(line), "path": name} for line in counts.splitlines() if line.strip())
            text += await _git("diff", "--no-index", "--", "/dev/null", name, cwd=where, check=False)
    data = text.encode()
    start = _char_start(data, min(offset, len(data)))
    end = _char_start(data, min(start + DIFF_PAGE, len(data)))
    return {"job": job.id, "branch": job.branch, "base": job.base, "files": files[:FILES_MAX],
            "files_more": max(0, len(files) - FILES_MAX), "size": len(data), "offset": start,
            "text": data[start:end].decode(errors="replace"), "next": end if end < len(data) else None}


def _numstat(line: str) -> dict[str, Any]:
    added, deleted, path = line.split("\t", 2)
    return {"path": path, "added": int(added) if added.isdigit() else None,
            "deleted": int(deleted) if deleted.isdigit() else None}


def _char_start(data: bytes, at: int) -> int:
    """``at`` moved back to the start of a UTF-8 character, so a page never splits one."""
    while 0 < at < len(data) and data[at] & 0xC0 == 0x80:
        at -= 1
    return at


# -- merge ------------------------------------------------------------------------------------------------
async def merge(sup: "Supervisor", job_id: str) -> dict[str, Any]:
    """Merge the job's branch into its base where the base is checked out (the main checkout),
    when that is a fast-forward or a merge without conflicts; refuse, saying what is in the way."""
    job = _reviewable(sup, job_id)
    repo, branch, base = str(job.repo), str(job.branch), str(job.base)
    if not (await git("show-ref", "--verify", "--quiet", f"refs/heads/{base}", cwd=repo, check=False)).ok:
        raise _refused(f"its base {base} is not a branch (HEAD was detached at spawn, or the branch is gone): "
                       f"merge {branch} by hand")
    if job.worktree is not None:
        seen = await look(job)
        if seen.dirty:
            raise _refused(f"job {job.id}'s worktree has uncommitted changes ({', '.join(seen.dirty[:5])}): "
                           "only commits merge; commit them first")
    target = await _checked_out(repo, base)
    if target is None:
        raise _refused(f"{base} is not checked out in any worktree of {repo}: check it out there first")
    in_the_way = (await _git("status", "--porcelain", "--untracked-files=no", cwd=target)).splitlines()
    if in_the_way:
        raise _refused(f"{target} has uncommitted changes: {', '.join(l[3:] for l in in_the_way[:10])}")
    ahead = int((await _git("rev-list", "--count", f"{base}..{branch}", cwd=repo)).strip())
    if ahead == 0:
        return {"job": job.id, "outcome": "up to date", "branch": branch, "base": base, "where": target}
    if (await git("merge-base", "--is-ancestor", base, branch, cwd=repo, check=False)).ok:
        await _git("merge", "--ff-only", branch, cwd=target)
        return {"job": job.id, "outcome": "fast-forward", "commits": ahead, "branch": branch, "base": base,
                "where": target}
    trial = await git("merge-tree", "--write-tree", "--name-only", "--no-messages", base, branch, cwd=repo,
                      check=False)
    if not trial.ok:
        conflicts = trial.out.splitlines()[1:]
        raise _refused(f"merging {branch} into {base} conflicts in {', '.join(conflicts[:20]) or tail(trial.err)}: "
                       "resolve it by hand")
    ran = await git("merge", "--no-ff", "--no-edit", "-m", f"Merge {branch} (roost job {job.id}: {job.title})",
                    branch, cwd=target, check=False)
    if not ran.ok:
        await git("merge", "--abort", cwd=target, check=False)
        raise _refused(f"git merge refused: {tail(ran.out + ran.err)}")
    return {"job": job.id, "outcome": "merged", "commits": ahead, "branch": branch, "base": base, "where": target}


async def _checked_out(repo: str, branch: str) -> str | None:
    """The worktree of ``repo`` that has ``branch`` checked out, if one has."""
    path = None
    for line in (await _git("worktree", "list", "--porcelain", cwd=repo)).splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line == f"branch refs/heads/{branch}":
            return path
    return None
