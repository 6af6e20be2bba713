"""Taking a job's worktree away without losing anything, and bringing it back (docs/worktrees.md).

``look`` reads what is in a worktree (for the rule in ``roost.rules.teardown``); ``remove``
first saves every commit the worktree holds under ``refs/roost/archive/ID`` and then asks git to
remove it without ``--force`` (git refuses whatever it would lose, and the refusal keeps it);
``restore`` makes it again from that ref when the job is unarchived.
"""

from __future__ import annotations

import asyncio
import filecmp
import os
import shutil
import json
from dataclasses import dataclass
from pathlib import Path

from roost.daemon.git.run import GitError, git, git_chunks
from roost.models import Job
from roost.paths import make_private_dir
from roost.rules.teardown import WorktreeFacts

#: The file in a worktree's private git directory that says its setup ran (and what was copied in).
READY_MARK = "roost-setup.json"
#: Where roost keeps each removed worktree's commits: ``refs/roost/archive/ID``.
ARCHIVE_REFS = "refs/roost/archive/"
#: The most reflog entries read (of HEAD and of the branch); more keeps the worktree.
REFLOG_MAX = 1000
#: The most bytes of ``git status`` read about one worktree.
STATUS_MAX = 4 * 1024 * 1024
#: The most directory entries looked at under ignored and untracked directories for a nested
#: repository (a ``.git``); past it the worktree is kept, since roost cannot say nothing is there.
NESTED_SCAN_MAX = 200_000
#: Who the archive commits are by (roost's own commits; the person's identity is not needed).
_IDENTITY = {"GIT_AUTHOR_NAME": "roost", "GIT_AUTHOR_EMAIL": "roost@localhost",
             "GIT_COMMITTER_NAME": "roost", "GIT_COMMITTER_EMAIL": "roost@localhost"}


@dataclass
class Look:
    """A worktree as it is now, with what removing it needs: the copies roost put in unchanged
    (deleted first, so git's own check passes) and the commits its reflogs name."""

    facts: WorktreeFacts
    copies: tuple[str, ...] = ()
    tips: tuple[str, ...] = ()


def archive_ref(job: Job) -> str:
    return ARCHIVE_REFS + job.id


async def gitdir(path: Path | str) -> Path:
    return Path((await git("rev-parse", "--absolute-git-dir", cwd=path)).out.strip())


async def look(job: Job, users: tuple[str, ...] = ()) -> Look:
    """What is in the job's worktree: uncommitted and untracked files, submodules, how far its
    HEAD and branch are ahead of its base, the commits its reflogs name."""
    assert job.worktree is not None and job.repo is not None
    path = Path(job.worktree)
    if not path.is_dir():
        return Look(WorktreeFacts(exists=False))
    private = await gitdir(path)
    changed, untracked = await status(path)
    copied, at_setup = _marked(private / READY_MARK)
    copies = tuple(await asyncio.to_thread(_unchanged, Path(job.repo), path, [n for n in untracked if n in copied]))
    untracked = [n for n in untracked if n not in copies]
    hidden = await ignored(path)
    nested, scan_over = await asyncio.to_thread(_nested_repositories, path,
                                                [n for n in (*hidden, *untracked) if n.endswith("/")])
    made: tuple[str, ...] = ()
    if job.driver_opts.get("keep_ignored"):  # the ignored files the job made: not there at setup, not copies
        kept = set(await asyncio.to_thread(_unchanged, Path(job.repo), path, [n for n in hidden if n in copied]))
        made = tuple(n for n in hidden if n not in at_setup and n not in kept)
    modules = private / "modules"
    submodules = tuple(sorted(p.name for p in modules.iterdir())) if modules.is_dir() else ()
    tips: list[str] = []
    over = False
    branch = (str(job.branch),) if job.branch else ()
    for ref, where in (("HEAD", path), *((f"refs/heads/{b}", Path(job.repo)) for b in branch)):
        ran = await git("log", "-g", "--format=%H", f"-n{REFLOG_MAX + 1}", "--end-of-options", ref, "--",
                        cwd=where, check=False)
        found = ran.out.split() if ran.ok else []
        over = over or len(found) > REFLOG_MAX
        tips.extend(found[:REFLOG_MAX])
    facts = WorktreeFacts(exists=True, changed=tuple(changed), untracked=tuple(untracked),
                          branch_ahead=await _count(job.repo, *branch, f"^{job.base}") if branch else None,
                          ahead=await _count(str(path), "HEAD", *branch, f"^{job.base}"),
                          submodules=submodules, users=users, reflog_over=over, nested=nested,
                          nested_unchecked=scan_over, ignored=made)
    return Look(facts, copies, tuple(dict.fromkeys(tips)))


def _marked(mark: Path) -> tuple[set[str], set[str]]:
    """What setup copied in and the ignored entries there were once it ran, by the mark; none when
    there is no mark or it cannot be read (then every untracked or ignored file counts as the
    agent's work, which keeps more, never less)."""
    try:
        found = json.loads(mark.read_text())
    except (OSError, ValueError):
        return set(), set()
    if not isinstance(found, dict):
        return set(), set()
    return _names_in(found.get("copied")), _names_in(found.get("ignored"))


def _names_in(value: object) -> set[str]:
    return {n for n in value if isinstance(n, str)} if isinstance(value, list) else set()


async def ignored(path: Path) -> list[str]:
    """The ignored files of the worktree, an ignored directory as one name ending in ``/`` (git
    status does not list them, and ``git worktree remove`` deletes them)."""
    out = bytearray()
    async for chunk in git_chunks("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory",
                                  cwd=path, env={}, limit=STATUS_MAX):
        out += chunk
    return [n for n in out.decode(errors="replace").split("\0") if n]


def _nested_repositories(path: Path, dirs: list[str]) -> tuple[tuple[str, ...], bool]:
    """The git repositories (a ``.git`` file or directory) in or below ``dirs`` of the worktree,
    and whether there was more to look at than NESTED_SCAN_MAX entries."""
    found: list[str] = []
    seen = 0
    stack = [path / d for d in dirs]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        seen += len(entries)
        if seen > NESTED_SCAN_MAX:
            return tuple(sorted(found)), True
        for entry in entries:
            if entry.name == ".git":
                found.append(os.path.relpath(here, path) + "/")
            elif entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return tuple(sorted(found)), False


async def status(path: Path) -> tuple[list[str], list[str]]:
    """Changed and untracked names, read with ``-z`` (a tab, a newline or non-ASCII in a name is
    the name), submodules included."""
    out = bytearray()
    async for chunk in git_chunks("status", "--porcelain=v1", "-z", "--untracked-files=all",
                                  "--ignore-submodules=none", cwd=path, env={}, limit=STATUS_MAX):
        out += chunk
    changed, untracked = [], []
    fields = out.decode(errors="replace").split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        if entry[:2] == "??":
            untracked.append(entry[3:])
            continue
        changed.append(entry[3:])
        if entry[0] in "RC":
            i += 1  # the name it came from
    return changed, untracked


def _unchanged(repo: Path, path: Path, names: list[str]) -> list[str]:
    """The copied-in files still the same as the main checkout's (the rest are the agent's work)."""
    return [n for n in names if (repo / n).is_file() and filecmp.cmp(repo / n, path / n, shallow=False)]


def _copy_back(repo: Path, path: Path, names: tuple[str, ...]) -> None:
    for name in names:
        if not (path / name).exists():
            shutil.copy2(repo / name, path / name)


async def _count(cwd: str, *revisions: str) -> int | None:
    ran = await git("rev-list", "--count", "--end-of-options", *revisions, "--", cwd=cwd, check=False)
    return int(ran.out.strip()) if ran.ok else None


# -- removing -----------------------------------------------------------------------------------------------
async def save(job: Job, head: str, tips: tuple[str, ...]) -> str:
    """Write ``refs/roost/archive/ID``: a commit of roost's whose first parent is the worktree's
    HEAD and whose other parents are every commit its reflogs (and an earlier archive) name that
    HEAD lacks, so none of them depends on the worktree any longer. Its message says the branch
    and the path, for ``restore``."""
    repo = str(job.repo)
    earlier = await git("rev-parse", "--verify", "--quiet", "--end-of-options", archive_ref(job), cwd=repo,
                        check=False)
    parents = [head]
    rest = [*tips, *earlier.out.split()]
    if rest:
        lone = (await git("merge-base", "--independent", head, *rest, cwd=repo)).out.split()
        parents += [t for t in lone if t != head]
    message = (f"roost: the worktree of job {job.id} as it was archived\n\n"
               f"branch: {job.branch or ''}\npath: {job.worktree}\n").encode()
    argv = ["commit-tree"]
    for parent in parents:
        argv += ["-p", parent]
    commit = (await git(*argv, "--end-of-options", f"{head}^{{tree}}", cwd=repo, stdin=message,
                        env=_IDENTITY)).out.strip()
    await git("update-ref", "-m", "roost: archived", "--end-of-options", archive_ref(job), commit, cwd=repo)
    return commit


async def forget(job: Job) -> str:
    """A worktree deleted by hand: its HEAD and HEAD's reflog (still in git's note of it) are
    saved under the archive ref, then git's note of this worktree (only this one) is removed."""
    repo = str(job.repo)
    common = Path((await git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=repo)).out.strip())
    names = [d.name for d in (common / "worktrees").glob("*")
             if (d / "gitdir").is_file() and (d / "gitdir").read_text().strip() == f"{job.worktree}/.git"]
    said = f"its worktree {job.worktree} was deleted by hand"
    if not names:
        return said
    head = await git("rev-parse", "--verify", "--quiet", "--end-of-options", f"worktrees/{names[0]}/HEAD", cwd=repo,
                     check=False)
    if head.ok:
        log = await git("log", "-g", "--format=%H", f"-n{REFLOG_MAX}", "--end-of-options",
                        f"worktrees/{names[0]}/HEAD", "--", cwd=repo, check=False)
        saved = await save(job, head.out.strip(), tuple(dict.fromkeys(log.out.split())))
        said += f"; the commits it had are kept as {archive_ref(job)} ({saved[:12]})"
    await git("worktree", "remove", "--end-of-options", str(job.worktree), cwd=repo)
    return said + "; git's note of it is removed"


async def checked_out(repo: str, branch: str) -> str | None:
    """The worktree of ``repo`` that has ``branch`` checked out, if one has."""
    path = None
    for line in (await git("worktree", "list", "--porcelain", cwd=repo)).out.splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree "):]
        elif line == f"branch refs/heads/{branch}":
            return path
    return None


async def remove(job: Job, seen: Look, delete_branch: bool) -> list[str]:
    """Save the worktree's commits, then remove it as git allows (never ``--force``: git refuses
    when anything would be lost, and GitError keeps it); the branch goes only when its base has
    every commit of it and it is checked out nowhere else. What was done, for the timeline."""
    path, repo = str(job.worktree), str(job.repo)
    head = (await git("rev-parse", "--verify", "HEAD", cwd=path)).out.strip()
    saved = await save(job, head, seen.tips)
    for name in seen.copies:
        await asyncio.to_thread((Path(path) / name).unlink, missing_ok=True)
    try:
        await git("worktree", "remove", "--end-of-options", path, cwd=repo)
    except GitError:  # kept after all: it gets its copies back
        await asyncio.to_thread(_copy_back, Path(repo), Path(path), seen.copies)
        raise
    notes = [f"removed its worktree {path}; its commits are kept as {archive_ref(job)} ({saved[:12]}): "
             f"roost unarchive {job.id} brings it back"]
    if delete_branch and job.branch and await checked_out(repo, job.branch) is None:
        tip = (await git("rev-parse", "--verify", "--end-of-options", f"refs/heads/{job.branch}", cwd=repo)).out.strip()
        # Deleted only if it is still where it was looked at (update-ref checks the old value).
        if (await git("update-ref", "-d", "--end-of-options", f"refs/heads/{job.branch}", tip, cwd=repo,
                      check=False)).ok:
            notes.append(f"deleted its branch {job.branch} (its base has all of it)")
    return notes


# -- bringing back --------------------------------------------------------------------------------------------
@dataclass
class Back:
    """Where a restored worktree is, on which branch (None: HEAD detached), and what was done."""

    path: str
    branch: str | None
    text: str


async def restore(job: Job) -> Back | str | None:
    """Make the job's worktree again from ``refs/roost/archive/ID``, at its old path, with its
    HEAD where it was: on its branch when that is there (made again at that commit when it was
    deleted), else detached. None when there is nothing to bring back; a str says why not."""
    repo = str(job.repo)
    ref = archive_ref(job)
    if not (await git("rev-parse", "--verify", "--quiet", "--end-of-options", ref, cwd=repo, check=False)).ok:
        return None
    body = (await git("log", "-1", "--format=%B", "--end-of-options", ref, "--", cwd=repo)).out
    said = dict(line.split(": ", 1) for line in body.splitlines() if ": " in line)
    path, branch = said.get("path", ""), said.get("branch") or None
    if not path or Path(path).exists():
        return f"its worktree was not made again: {path or 'its old path'} is taken; {ref} holds its commits"
    head = (await git("rev-parse", "--verify", "--end-of-options", f"{ref}^1", cwd=repo)).out.strip()
    tip = await git("rev-parse", "--verify", "--quiet", "--end-of-options", f"refs/heads/{branch}", cwd=repo,
                    check=False) if branch else None
    make_private_dir(Path(path).parent)
    if tip is not None and tip.ok and tip.out.strip() == head:
        argv, on = ["worktree", "add", "--end-of-options", path, str(branch)], branch
    elif tip is not None and not tip.ok:
        argv, on = ["worktree", "add", "-b", str(branch), "--end-of-options", path, head], branch
    else:
        argv, on = ["worktree", "add", "--detach", "--end-of-options", path, head], None
    try:
        await git(*argv, cwd=repo)
    except GitError as exc:
        return f"its worktree was not made again: {exc}; {ref} holds its commits"
    where = f"on its branch {on}" if on else f"with HEAD detached at {head[:12]}"
    return Back(path, on, f"made its worktree {path} again from {ref}, {where}")
