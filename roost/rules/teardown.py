"""What becomes of a job's worktree when it is archived or pruned, and the words ``roost worktrees``
says about it: pure functions of what git and the index showed (docs/worktrees.md).

Commits are never a reason to keep a worktree: before one goes, roost writes
``refs/roost/archive/ID`` (its HEAD and every commit its reflogs name), and its branch is deleted
only when the base has all of the branch's commits. What a ref cannot hold keeps the worktree:
uncommitted or untracked files, initialized submodules (their commits live in the worktree's
own git directory), nested repositories (a ``.git`` below it, ignored paths included: git's
status does not list them and its removal deletes them), ignored files the job made when its
profile says ``keep_ignored``, another live job working in it, and a reflog longer than roost reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: How many names a reason quotes.
NAMES_SHOWN = 5


@dataclass(frozen=True)
class WorktreeFacts:
    """A worktree as git and the index showed it."""

    exists: bool
    #: Tracked files changed, staged or deleted.
    changed: tuple[str, ...] = ()
    #: Untracked files that are not ignored (files roost copied in, unchanged, are not listed).
    untracked: tuple[str, ...] = ()
    #: Commits on the branch that the base lacks; None when the base is gone.
    branch_ahead: int | None = 0
    #: Commits in the worktree (its HEAD and its branch) that the base lacks; None when unknown.
    ahead: int | None = 0
    #: Initialized submodules (their paths).
    submodules: tuple[str, ...] = ()
    #: Other jobs, not archived, whose cwd is inside the worktree.
    users: tuple[str, ...] = ()
    #: A reflog (HEAD's or the branch's) has more entries than roost reads (REFLOG_MAX).
    reflog_over: bool = False
    #: Git repositories below the worktree (a ``.git`` under an ignored or untracked path): their
    #: commits may be nowhere else, and ``git worktree remove`` deletes them with the rest.
    nested: tuple[str, ...] = ()
    #: There was more under ignored and untracked directories than roost looks through for them.
    nested_unchecked: bool = False
    #: Ignored files the job made, when its profile says to keep them (``keep_ignored``).
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """``forget``: it was deleted by hand; ``keep``: it stays (``why``); ``remove``: it goes, after
    roost saved its commits under its archive ref, with its branch when ``delete_branch``."""

    action: Literal["forget", "keep", "remove"]
    why: str = ""
    delete_branch: bool = False


def _names(what: str, names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN]) + (" …" if len(names) > NAMES_SHOWN else "")
    return f"{len(names)} {what}{'s' if len(names) != 1 else ''} ({shown})"


def unsaved(facts: WorktreeFacts) -> str:
    """Which files a removal would lose ("" when none): changed and untracked counted apart."""
    parts = []
    if facts.changed:
        parts.append(_names("changed file", facts.changed))
    if facts.untracked:
        parts.append(_names("untracked file", facts.untracked))
    return " and ".join(parts)


def decide(facts: WorktreeFacts) -> Decision:
    """Keep, remove or forget the worktree; a reason for whatever stays."""
    if not facts.exists:
        return Decision("forget", "it was deleted by hand")
    if facts.users:
        return Decision("keep", f"{_names('job', facts.users)} still work{'s' if len(facts.users) == 1 else ''} "
                                "in it; it goes when they are archived")
    if facts.submodules:
        return Decision("keep", f"it has {_names('initialized submodule', facts.submodules)} whose commits "
                                "live only in the worktree's git directory; remove it by hand when they are safe")
    if facts.nested:
        return Decision("keep", f"it has {_names('nested git repositor' + ('y' if len(facts.nested) == 1 else 'ie'), facts.nested)} "
                                "whose commits may be nowhere else, and removing the worktree would delete them; "
                                "move them out, then remove it by hand")
    if facts.nested_unchecked:
        return Decision("keep", "its ignored and untracked directories hold more than roost looks through for "
                                "nested git repositories; remove it by hand when nothing in it is needed")
    files = unsaved(facts)
    if files:
        return Decision("keep", f"{files} not committed")
    if facts.ignored:
        return Decision("keep", f"it has {_names('ignored file', facts.ignored)} the job made, and its driver "
                                "says keep_ignored = true; remove it by hand when they are not needed")
    if facts.reflog_over:
        return Decision("keep", "its reflog has more entries than roost saves; `git reflog` shows them")
    return Decision("remove", delete_branch=facts.branch_ahead == 0)


def condition(changed: int, untracked: int, ahead: int | None, submodules: int = 0) -> str:
    """``clean, merged`` / ``2 changed, 1 untracked, 3 unmerged``: what `roost worktrees` says of
    a worktree. ``merged`` only when nothing is uncommitted and its base has every commit of its
    HEAD and its branch."""
    words = [f"{changed} changed"] if changed else []
    if untracked:
        words.append(f"{untracked} untracked")
    if ahead is None:
        words.append("base gone")
    elif ahead:
        words.append(f"{ahead} unmerged")
    elif not words:
        words.append("clean, merged")
    if submodules:
        words.append(f"{submodules} submodule{'s' if submodules != 1 else ''}")
    return ", ".join(words)


def merged(facts: WorktreeFacts) -> bool:
    """Whether everything in the worktree is in its base: nothing uncommitted, nothing ahead."""
    return facts.exists and not facts.changed and not facts.untracked and facts.ahead == 0
