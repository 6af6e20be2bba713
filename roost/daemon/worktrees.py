"""Each job in its own git worktree: made at spawn, set up before its agent's first start, and
removed with the job's archive when nothing in it is unsaved (docs/worktrees.md).

All git work runs through ``gitrun`` (asyncio subprocesses under a timeout), never on the event
loop. What the engine must record about a worktree (removed, kept and why, deleted by hand)
comes back to the job's mailbox as a ``Settled`` message, so the record changes in order.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.config import Config, DriverProfile, WorktreeSettings
from roost.daemon.gitrun import GitError, git, shell
from roost.daemon.messages import Message
from roost.models import Job
from roost.paths import Paths, make_private_dir
from roost.protocol import ErrorCode, ProtocolError

if TYPE_CHECKING:
    from roost.daemon.engine import Engine
    from roost.daemon.supervisor import Supervisor

#: The file in a worktree's private git directory that says its setup ran (and what was copied in).
READY_MARK = "roost-setup.json"
#: How long an archive waits for the job's worker to be gone before it looks at the worktree.
WORKER_GONE_WAIT = 15.0
#: How many worktrees are looked at (git status, du) at once.
LOOK_AT_ONCE = 8
#: The most rows ``worktrees`` answers with.
LIST_MAX = 1000

#: Worktrees being settled now (an archive and a prune never remove the same one twice).
_busy: set[str] = set()


def place(paths: Paths, config: Config) -> Path:
    """Where new worktrees go: the configured ``dir``, else under the state directory."""
    return Path(config.worktree.dir).expanduser() if config.worktree.dir else paths.state_dir / "worktrees"


def _refuse(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.BAD_ARGS, message)


# -- at spawn --------------------------------------------------------------------------------------------
async def prepare(job: Job, args: dict[str, Any], profile: DriverProfile, paths: Paths, config: Config) -> None:
    """Give a job that asks for one (``worktree`` of spawn, else its driver profile) a worktree of
    its own on a new branch, before its record is saved: its cwd becomes the same directory in
    the worktree. A child that does not ask works in its parent's directory (its worktree)."""
    want = args.get("worktree")
    if want is None:
        want = profile.worktree
    if not want:
        if args.get("branch") or args.get("base"):
            raise _refuse("spawn: branch and base are for a job with its own worktree (give worktree too)")
        return
    try:
        top = (await git("rev-parse", "--show-toplevel", cwd=job.cwd)).out.strip()
    except GitError:
        raise _refuse(f"{job.cwd} is not inside a git repository: a job's worktree is made from the repository "
                      "that contains its cwd (spawn it elsewhere, or without --worktree)") from None
    common = (await git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=job.cwd)).out.strip()
    repo = str(Path(common).parent) if Path(common).name == ".git" else top
    subdir = os.path.relpath(job.cwd, top)
    base = args.get("base") or await _current_ref(job.cwd)
    branch = args.get("branch") or f"roost/{job.id}"
    where = place(paths, config)
    make_private_dir(where)
    path = where / job.id
    try:
        await git("worktree", "add", "-b", branch, str(path), base, cwd=repo)
    except GitError as exc:
        raise _refuse(f"could not make a worktree for the job: {exc}") from None
    job.repo, job.worktree, job.branch, job.base = repo, str(path), branch, base
    job.cwd = str(path / subdir) if subdir != "." else str(path)


async def _current_ref(cwd: str) -> str:
    """HEAD's branch name, or its commit when HEAD is detached."""
    named = await git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=cwd, check=False)
    if named.ok:
        return named.out.strip()
    return (await git("rev-parse", "--verify", "HEAD", cwd=cwd)).out.strip()


# -- before the agent's first start ------------------------------------------------------------------------
async def before_start(job: Job | None, settings: WorktreeSettings) -> None:
    """Copy the configured files in and run the setup commands, once per worktree, before the
    job's agent first starts; GitError (the start fails with it) says what went wrong."""
    if job is None or job.worktree is None or job.repo is None:
        return
    path = Path(job.worktree)
    if not path.is_dir():
        raise GitError(f"its worktree {path} is gone (deleted by hand?); `roost worktrees` notices it")
    mark = await _mark(path)
    if mark.exists():
        return
    copied = await asyncio.to_thread(_copy_in, Path(job.repo), path, settings.copy)
    for command in settings.setup:
        try:
            await shell(command, path, settings.setup_timeout, _env(job))
        except GitError as exc:
            raise GitError(f"worktree setup failed: {exc}") from None
    await asyncio.to_thread(mark.write_text, json.dumps({"copied": copied}))


async def _mark(path: Path) -> Path:
    gitdir = (await git("rev-parse", "--absolute-git-dir", cwd=path)).out.strip()
    return Path(gitdir) / READY_MARK


def _copy_in(repo: Path, path: Path, patterns: tuple[str, ...]) -> list[str]:
    """Copy what the globs match in the main checkout to the same place in the worktree (a file
    the worktree already has is left alone); the relative paths copied."""
    copied = []
    for pattern in patterns:
        for found in sorted(glob.glob(pattern, root_dir=repo, recursive=True, include_hidden=True)):
            source, target = repo / found, path / found
            if not source.is_file() or target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            copied.append(found)
    return copied


def _env(job: Job) -> dict[str, str]:
    return {"ROOST_JOB_ID": job.id, "ROOST_WORKTREE": job.worktree or "", "ROOST_REPO": job.repo or "",
            "ROOST_BRANCH": job.branch or "", "ROOST_BASE": job.base or ""}


# -- what is in a worktree -------------------------------------------------------------------------------
@dataclass
class Look:
    """A worktree as it is now: there or not, what is uncommitted, how far its branch is ahead."""

    exists: bool
    dirty: list[str] = field(default_factory=list)
    #: Commits on its branch that its base does not have; None when that cannot be told.
    ahead: int | None = None

    @property
    def why_kept(self) -> str:
        """Why removing it would lose something ("" when nothing would be lost)."""
        if self.dirty:
            shown = ", ".join(self.dirty[:5]) + (" …" if len(self.dirty) > 5 else "")
            return f"{len(self.dirty)} uncommitted change{'s' if len(self.dirty) != 1 else ''} ({shown})"
        if self.ahead is None:
            return "its base is gone, so whether its branch is merged cannot be told"
        if self.ahead:
            return f"its branch has {self.ahead} commit{'s' if self.ahead != 1 else ''} not merged into its base"
        return ""


async def look(job: Job) -> Look:
    """What removing the job's worktree would lose. Files the setup copied in do not count."""
    assert job.worktree is not None and job.repo is not None
    path = Path(job.worktree)
    if not path.is_dir():
        return Look(exists=False)
    status = await git("status", "--porcelain", "--untracked-files=all", cwd=path)
    mark = await _mark(path)
    copied = set(json.loads(mark.read_text()).get("copied", [])) if mark.exists() else set()
    dirty = [line[3:] for line in status.out.splitlines() if line[3:] not in copied]
    return Look(exists=True, dirty=dirty, ahead=await _ahead(job))


async def _ahead(job: Job) -> int | None:
    ran = await git("rev-list", "--count", f"{job.base}..{job.branch}", cwd=job.repo or ".", check=False)
    return int(ran.out.strip()) if ran.ok else None


# -- settling a worktree (archive, prune) ------------------------------------------------------------------
@dataclass
class Settled(Message):
    """What became of a job's worktree: for its record and its timeline."""

    path: str
    #: The worktree is no more (removed, or deleted by hand): the record forgets its path.
    gone: bool
    #: Its branch was deleted too (it had nothing of its own).
    branch_deleted: bool
    text: str


def on_settled(eng: "Engine", job: Job, msg: Settled) -> None:
    with eng.store.transaction():
        eng.timeline(job, "worktree", message=msg.text, path=msg.path, removed=msg.gone)
        if msg.gone and job.worktree == msg.path:
            job.worktree = None
        if msg.branch_deleted:
            job.branch = None
        eng.save(job)
    msg.answer(None)


async def settle(job: Job, settings: WorktreeSettings) -> Settled:
    """Remove the job's worktree if nothing in it is unsaved (teardown first); else keep it and say why."""
    path = str(job.worktree)
    if path in _busy:
        return Settled(path, False, False, f"kept its worktree {path} for now: it is being removed already")
    _busy.add(path)
    try:
        seen = await look(job)
        if not seen.exists:
            await git("worktree", "prune", cwd=job.repo or ".", check=False)
            return Settled(path, True, False, f"its worktree {path} was deleted by hand; git's note of it is pruned")
        if seen.why_kept:
            return Settled(path, False, False, f"kept its worktree {path}: {seen.why_kept}")
        notes = []
        for command in settings.teardown:
            try:
                await shell(command, path, settings.setup_timeout, _env(job))
            except GitError as exc:
                notes.append(f"teardown failed: {exc}")
        await git("worktree", "remove", "--force", path, cwd=job.repo or ".")
        deleted = (await git("branch", "-D", str(job.branch), cwd=job.repo or ".", check=False)).ok
        if deleted:
            notes.append(f"deleted its branch {job.branch} (nothing of its own unmerged)")
        return Settled(path, True, deleted, "; ".join([f"removed its worktree {path}", *notes]))
    except GitError as exc:
        return Settled(path, False, False, f"kept its worktree {path}: {exc}")
    finally:
        _busy.discard(path)


def after_archive(eng: "Engine", job: Job) -> None:
    """The job was archived: its worktree goes once its worker has (an effect; the outcome is posted back)."""
    if job.worktree is not None:
        eng.spawn_task(_settle_archived(eng, Job.from_dict(job.to_dict())))


async def _settle_archived(eng: "Engine", job: Job) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WORKER_GONE_WAIT
    while job.id in eng.slots and loop.time() < deadline:
        await asyncio.sleep(0.05)
    eng.post(job.id, await settle(job, eng.config.worktree))


# -- the operations: worktrees, worktrees_prune -------------------------------------------------------------
def _owners(sup: "Supervisor") -> list[Job]:
    return sorted((j for j in sup.index.jobs.values() if j.worktree is not None), key=lambda j: j.created_at)


async def _looked(jobs: list[Job]) -> list[tuple[Job, Look | GitError]]:
    gate = asyncio.Semaphore(LOOK_AT_ONCE)

    async def one(job: Job) -> tuple[Job, Look | GitError]:
        async with gate:
            try:
                return job, await look(job)
            except GitError as exc:
                return job, exc

    return list(await asyncio.gather(*(one(j) for j in jobs)))


async def _size_kb(path: str) -> int | None:
    try:
        proc = await asyncio.create_subprocess_exec("du", "-sk", path, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
        return int(out.split()[0])
    except (OSError, ValueError, IndexError, asyncio.TimeoutError):
        return None


async def _forget_gone(sup: "Supervisor", job: Job) -> None:
    """A worktree deleted by hand: git's note of it is pruned and the job says so."""
    sup.engine.post(job.id, await settle(job, sup.config.worktree))


async def listing(sup: "Supervisor") -> dict[str, Any]:
    """Every job's own worktree: job, branch, path, size, clean or dirty, merged or not."""
    jobs = _owners(sup)
    rows = []
    for job, seen in await _looked(jobs[:LIST_MAX]):
        row: dict[str, Any] = {"job": job.id, "title": job.title, "state": job.state.value,
                               "archived": job.archived_at is not None, "branch": job.branch, "base": job.base,
                               "path": job.worktree}
        if isinstance(seen, GitError):
            row.update(exists=True, error=str(seen))
        elif not seen.exists:
            row.update(exists=False)
            await _forget_gone(sup, job)
        else:
            row.update(exists=True, dirty=len(seen.dirty), merged=seen.ahead == 0, ahead=seen.ahead,
                       size_kb=await _size_kb(str(job.worktree)))
        rows.append(row)
    return {"rows": rows, "more": max(0, len(jobs) - LIST_MAX)}


async def prune(sup: "Supervisor") -> dict[str, Any]:
    """Remove every worktree of an archived job that holds nothing unsaved; say what was kept and why."""
    removed, kept = [], []
    for job in _owners(sup)[:LIST_MAX]:
        if job.archived_at is None and Path(str(job.worktree)).is_dir():
            kept.append({"job": job.id, "path": job.worktree, "why": "the job is not archived"})
            continue
        outcome = await settle(job, sup.config.worktree)
        sup.engine.post(job.id, outcome)
        (removed if outcome.gone else kept).append({"job": job.id, "path": outcome.path, "why": outcome.text})
    return {"removed": removed, "kept": kept}
