"""The teardown rule and the words `roost worktrees` says, without git (roost/rules/teardown.py)."""

from __future__ import annotations

from roost.rules.teardown import WorktreeFacts, condition, decide, merged, unsaved


def test_gone_is_forgotten_and_clean_is_removed() -> None:
    assert decide(WorktreeFacts(exists=False)).action == "forget"
    clean = decide(WorktreeFacts(exists=True))
    assert clean.action == "remove" and clean.delete_branch


def test_commits_never_keep_a_worktree_but_keep_its_branch() -> None:
    ahead = decide(WorktreeFacts(exists=True, branch_ahead=3, ahead=3))
    assert ahead.action == "remove" and not ahead.delete_branch
    base_gone = decide(WorktreeFacts(exists=True, branch_ahead=None, ahead=None))
    assert base_gone.action == "remove" and not base_gone.delete_branch
    detached = decide(WorktreeFacts(exists=True, branch_ahead=0, ahead=1))  # saved under the archive ref
    assert detached.action == "remove" and detached.delete_branch


def test_what_a_ref_cannot_hold_keeps_it_with_why() -> None:
    files = decide(WorktreeFacts(exists=True, changed=("README",), untracked=tuple(f"n{i}" for i in range(7))))
    assert files.action == "keep"
    assert files.why == "1 changed file (README) and 7 untracked files (n0, n1, n2, n3, n4 …) not committed"
    sub = decide(WorktreeFacts(exists=True, submodules=("lib",)))
    assert sub.action == "keep" and "1 initialized submodule (lib)" in sub.why
    used = decide(WorktreeFacts(exists=True, users=("ab12",), changed=("x",)))
    assert used.action == "keep" and used.why.startswith("1 job (ab12) still works in it")


def test_merged_only_when_nothing_is_uncommitted_and_nothing_ahead() -> None:
    assert merged(WorktreeFacts(exists=True))
    assert not merged(WorktreeFacts(exists=True, untracked=("new.txt",)))
    assert not merged(WorktreeFacts(exists=True, changed=("README",)))
    assert not merged(WorktreeFacts(exists=True, ahead=1))
    assert not merged(WorktreeFacts(exists=True, ahead=None))
    assert not merged(WorktreeFacts(exists=False))
    assert unsaved(WorktreeFacts(exists=True)) == ""


def test_the_words() -> None:
    assert condition(0, 0, 0) == "clean, merged"
    assert condition(2, 1, 0) == "2 changed, 1 untracked"
    assert condition(0, 3, 2) == "3 untracked, 2 unmerged"
    assert condition(0, 0, None, 1) == "base gone, 1 submodule"


def test_a_reflog_longer_than_roost_reads_keeps_it() -> None:
    long = decide(WorktreeFacts(exists=True, reflog_over=True))
    assert long.action == "keep" and "reflog" in long.why


def test_a_nested_repository_or_a_tree_too_big_to_look_through_keeps_the_worktree() -> None:
    nested = decide(WorktreeFacts(exists=True, nested=("vendor/a/", "vendor/b/")))
    assert nested.action == "keep" and nested.why.startswith("it has 2 nested git repositories (vendor/a/, vendor/b/)")
    one = decide(WorktreeFacts(exists=True, nested=("lib/",)))
    assert one.why.startswith("it has 1 nested git repository (lib/)")
    unchecked = decide(WorktreeFacts(exists=True, nested_unchecked=True))
    assert unchecked.action == "keep" and "more than roost looks through" in unchecked.why


def test_ignored_files_the_job_made_keep_the_worktree_and_say_the_key() -> None:
    kept = decide(WorktreeFacts(exists=True, ignored=("out/", "model.bin")))
    assert kept.action == "keep" and "2 ignored files (out/, model.bin) the job made" in kept.why
    assert "keep_ignored = true" in kept.why
