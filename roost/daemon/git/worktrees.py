"""Each job in its own git worktree: made at spawn, set up before its agent's first start, and
removed with the job's archive when the teardown rule says nothing would be lost (its commits
are saved under refs/roost/archive/ID first; docs/worktrees.md), made again on unarchive.

All git work runs through ``gitrun`` (asyncio subprocesses under a timeout), never on the event
loop. What the engine must record about a worktree (removed, kept and why, deleted by hand, made
again) comes back to the job's mailbox as a message, so the record changes in order.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
from pathlib import Path
from typing import Any

from roost.bounds import BRANCH_MAX
from roost.config import Config, DriverProfile, WorktreeSettings
from roost.daemon.git.run import GitError, git, shell
from roost.daemon.engine.messages import Message, Restored, Settled
from roost.daemon.engine.ports import EngineApi
from roost.daemon.git.teardown import (READY_MARK, Back, Look, archive_ref, forget, gitdir, ignored, look,
                                            remove, restore)
from roost.daemon.storage.records import Records
from roost.models import Job
from roost.paths import Paths, make_private_dir
from roost.protocol import ErrorCode, ProtocolError
from roost.rules.teardown import decide, merged


#: How many worktrees are looked at (git status, du) at once.
LOOK_AT_ONCE = 8
#: The most rows ``worktrees`` answers with.
LIST_MAX = 1000

#: Worktrees being settled now, each with what is set when it is done (an archive and a prune
#: never remove the same one twice; an archive waits for the one under way).
_busy: dict[str, asyncio.Event] = {}
#: Worktrees an archive will look at, and whether another archive asked for a look after that one.
_queued: dict[str, bool] = {}


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
    base = await _checked_base(args.get("base") or None, job.cwd)
    branch = await _checked_branch(args.get("branch") or None, job.id, repo)
    where = place(paths, config)
    make_private_dir(where)
    path = where / job.id
    try:
        commit = (await git("rev-parse", "--verify", "--end-of-options", f"{base}^{{commit}}", cwd=repo)).out.strip()
        await git("worktree", "add", "-b", branch, "--end-of-options", str(path), commit, cwd=repo)
    except GitError as exc:
        raise _refuse(f"could not make a worktree for the job: {exc}") from None
    job.repo, job.worktree, job.branch, job.base = repo, str(path), branch, base
    job.cwd = str(path / subdir) if subdir != "." else str(path)


async def _checked_branch(given: str | None, job_id: str, repo: str) -> str:
    """The new branch's name: ``roost/ID``, or the given one when git takes it as a branch name
    as written (``check-ref-format --branch``; nothing that starts with ``-`` or that git expands,
    such as ``@{-1}``) and no branch has it yet. Refused with what was wrong otherwise."""
    if given is None:
        return f"roost/{job_id}"
    if len(given) > BRANCH_MAX:
        raise _refuse(f"spawn: a branch name is at most {BRANCH_MAX} characters, not {len(given)}")
    if given.startswith("-"):
        raise _refuse(f"spawn: branch {given!r} starts with '-': a branch name may not look like an option")
    checked = await git("check-ref-format", "--branch", given, cwd=repo, check=False)
    if not checked.ok or checked.out.strip() != given:
        raise _refuse(f"spawn: branch {given!r} is not a valid branch name (git check-ref-format --branch)")
    if (await git("show-ref", "--verify", "--quiet", "--end-of-options", f"refs/heads/{given}", cwd=repo,
                  check=False)).ok:
        raise _refuse(f"spawn: branch {given!r} exists already: a job's worktree gets a new branch")
    return given


async def _checked_base(given: str | None, cwd: str) -> str:
    """Where the branch starts and what it merges into: HEAD's branch (or commit) by default; a
    given local branch by its name; anything else that names a commit (``rev-parse --verify
    --end-of-options BASE^{commit}``: a tag, ``HEAD~2``, ``origin/main``) as that commit, so what
    "merged" is measured against never moves with a HEAD."""
    if given is None:
        return await _current_ref(cwd)
    if len(given) > BRANCH_MAX:
        raise _refuse(f"spawn: a base is at most {BRANCH_MAX} characters, not {len(given)}")
    commit = None if given.startswith("-") else await git(
        "rev-parse", "--verify", "--quiet", "--end-of-options", f"{given}^{{commit}}", cwd=cwd, check=False)
    if commit is None or not commit.ok:
        raise _refuse(f"spawn: base {given!r} does not name a commit in this repository")
    if (await git("show-ref", "--verify", "--quiet", "--end-of-options", f"refs/heads/{given}", cwd=cwd,
                  check=False)).ok:
        return given
    return commit.out.strip()


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
    mark = await gitdir(path) / READY_MARK
    if mark.exists():
        return
    copied = await asyncio.to_thread(_copy_in, Path(job.repo), path, settings.copy)
    for command in settings.setup:
        try:
            await shell(command, path, settings.setup_timeout, _env(job))
        except GitError as exc:
            raise GitError(f"worktree setup failed: {exc}") from None
    await asyncio.to_thread(_put_mark, mark, copied, await ignored(path))


def _put_mark(mark: Path, copied: list[str], at_setup: list[str]) -> None:
    """Write the setup mark (what was copied in, and the ignored entries setup left: not the job's)
    whole before it is in place: an archive that looks at the worktree while setup ends reads no
    mark or all of it, never an empty file."""
    part = mark.with_name(mark.name + ".part")
    part.write_text(json.dumps({"copied": copied, "ignored": at_setup}))
    os.replace(part, mark)


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


# -- settling a worktree (archive, prune) ------------------------------------------------------------------
def on_settled(eng: EngineApi, job: Job, msg: Settled) -> None:
    eng.timeline(job, "worktree", message=msg.text, path=msg.path, removed=msg.gone)
    if msg.gone and job.worktree == msg.path:
        job.worktree = None
    if msg.branch_deleted:
        job.branch = None
    eng.save(job)
    msg.answer(None)


def on_restored(eng: EngineApi, job: Job, msg: Restored) -> None:
    eng.timeline(job, "worktree", message=msg.back.text, path=msg.back.path, removed=False)
    job.worktree, job.branch = msg.back.path, msg.back.branch
    eng.save(job)
    msg.answer(None)


def users(jobs: Records, job: Job) -> tuple[str, ...]:
    """The other jobs, not archived, whose cwd is inside ``job``'s worktree (its children working there)."""
    return tuple(j.id for j in jobs.working_in(str(job.worktree)) if j.id != job.id and j.archived_at is None)


async def settle(job: Job, settings: WorktreeSettings, used_by: tuple[str, ...] = ()) -> Settled:
    """Remove the job's worktree when the rule says so (teardown first; its commits saved under
    its archive ref), else keep it and say why (roost.rules.teardown)."""
    path = str(job.worktree)
    if path in _busy:
        return Settled(path, False, False, f"kept its worktree {path} for now: it is being removed already")
    _busy[path] = asyncio.Event()
    try:
        seen = await look(job, used_by)
        decision = decide(seen.facts)
        if decision.action == "forget":
            return Settled(path, True, False, await forget(job))
        if decision.action == "keep":
            return Settled(path, False, False, f"kept its worktree {path}: {decision.why}")
        notes = []
        for command in settings.teardown:
            try:
                await shell(command, path, settings.setup_timeout, _env(job))
            except GitError as exc:
                notes.append(f"teardown failed: {exc}")
        done = await remove(job, seen, decision.delete_branch)
        deleted = len(done) > 1
        return Settled(path, True, deleted, "; ".join([*done, *notes]))
    except GitError as exc:
        return Settled(path, False, False, f"kept its worktree {path}: {exc}")
    except (OSError, ValueError) as exc:  # an unreadable file in it: keep it, say so, never stall the archive
        return Settled(path, False, False, f"kept its worktree {path}: could not look at it: {exc}")
    finally:
        _busy.pop(path).set()


def after_archive(eng: EngineApi, job: Job) -> None:
    """The job was archived: its worktree goes once its worker has, and so does an archived
    job's worktree it was working in. A worktree whose jobs still have a worker waits for their
    exits (``after_exit``: nothing polls); one no worker holds is settled now (an effect; the
    outcome is posted back)."""
    owners = [o for o in eng.index.jobs.with_worktree() if o.archived_at is not None
              and (o.id == job.id or Path(job.cwd).is_relative_to(str(o.worktree)))]
    for owner in owners:
        path = str(owner.worktree)
        if _held(eng, owner.id, path):
            eng.teardowns[path] = owner.id
        else:
            _settle_soon(eng, owner.id, path)


def after_exit(eng: EngineApi, job: Job) -> None:
    """A worker exited: the archived worktrees that waited for it (and for no other) are settled."""
    for path, owner in list(eng.teardowns.items()):
        if (owner == job.id or Path(job.cwd).is_relative_to(path)) and not _held(eng, owner, path):
            del eng.teardowns[path]
            _settle_soon(eng, owner, path)


def _held(eng: EngineApi, owner: str, path: str) -> bool:
    """Whether the owner, or an archived job that worked in its worktree, still has a worker."""
    return owner in eng.slots or any(
        (j := eng.index.get(job_id)) is not None and j.archived_at is not None and Path(j.cwd).is_relative_to(path)
        for job_id in eng.slots)


def _settle_soon(eng: EngineApi, owner: str, path: str) -> None:
    """One look at a worktree at a time: an archive while one is under way asks for another after it."""
    if path in _queued:
        _queued[path] = True
        return
    _queued[path] = False
    eng.spawn_task(_settle_archived(eng, owner, path))


async def _settle_archived(eng: EngineApi, job_id: str, path: str) -> None:
    """Settle the worktree (after a settle of it already under way); again if another archive asked meanwhile."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            while path in _busy:
                await _busy[path].wait()
            current = eng.index.get(job_id)
            if current is None or current.archived_at is None or current.worktree != path:
                return  # unarchived meanwhile, or settled already
            outcome = await settle(Job.from_dict(current.to_dict()), eng.config.worktree,
                                   users(eng.index.jobs, current))
            outcome.reply = loop.create_future()
            eng.post(job_id, outcome)
            await outcome.reply  # the record has it before anyone looks again
            if not _queued.get(path):
                return
            _queued[path] = False
    finally:
        _queued.pop(path, None)


async def bring_back(job: Job) -> Message | None:
    """What to tell an unarchived job whose worktree roost removed: it was made again from its
    archive ref (``Restored``), or why not (a timeline note). None when it has nothing to bring back."""
    if job.worktree is not None or job.repo is None:
        return None
    try:
        back = await restore(job)
    except GitError as exc:
        back = f"its worktree was not made again: {exc}; {archive_ref(job)} holds its commits"
    if isinstance(back, Back):
        return Restored(back)
    return None if back is None else Settled(job.cwd, False, False, back)


# -- the operations: worktrees, worktrees_prune -------------------------------------------------------------
def _owners(eng: EngineApi) -> tuple[list[Job], int]:
    """The first LIST_MAX jobs that own a worktree, whole, and how many more there are."""
    owners = eng.index.jobs.with_worktree()
    return eng.index.jobs.whole([o.id for o in owners[:LIST_MAX]]), max(0, len(owners) - LIST_MAX)


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


async def _forget_gone(eng: EngineApi, job: Job) -> None:
    """A worktree deleted by hand: git's note of it is pruned and the job says so."""
    eng.post(job.id, await settle(job, eng.config.worktree))


def _seen_row(seen: Look) -> dict[str, Any]:
    facts = seen.facts
    return {"exists": True, "changed": len(facts.changed), "untracked": len(facts.untracked),
            "dirty": len(facts.changed) + len(facts.untracked), "ahead": facts.ahead,
            "submodules": len(facts.submodules), "merged": merged(facts)}


async def listing(eng: EngineApi) -> dict[str, Any]:
    """Every job's own worktree: job, branch, path, size, changed and untracked files, merged or not."""
    jobs, more = _owners(eng)
    rows = []
    for job, seen in await _looked(jobs):
        row: dict[str, Any] = {"job": job.id, "title": job.title, "state": job.state.value,
                               "archived": job.archived_at is not None, "branch": job.branch, "base": job.base,
                               "path": job.worktree}
        if isinstance(seen, GitError):
            row.update(exists=True, error=str(seen))
        elif not seen.facts.exists:
            row.update(exists=False)
            await _forget_gone(eng, job)
        else:
            row.update(_seen_row(seen), size_kb=await _size_kb(str(job.worktree)))
        rows.append(row)
    return {"rows": rows, "more": more}


async def prune(eng: EngineApi) -> dict[str, Any]:
    """Remove every worktree of an archived job that holds nothing unsaved; say what was kept and why."""
    removed, kept = [], []
    for job in _owners(eng)[0]:
        if job.archived_at is None and Path(str(job.worktree)).is_dir():
            kept.append({"job": job.id, "path": job.worktree, "why": "the job is not archived"})
            continue
        outcome = await settle(job, eng.config.worktree, users(eng.index.jobs, job))
        eng.post(job.id, outcome)
        (removed if outcome.gone else kept).append({"job": job.id, "path": outcome.path, "why": outcome.text})
    return {"removed": removed, "kept": kept}
