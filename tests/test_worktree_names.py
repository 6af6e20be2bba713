"""A branch or base that looks like a git option, or is not a plain name, is refused at spawn with
what was wrong, and nothing in the repository changes: every ref and every worktree is as it was
(docs/worktrees.md#making-one). Through the protocol, the CLI and a job's own shell."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roost.client import ClientError
from tests.conftest import DaemonHarness
from tests.gitrepo import git, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

#: (branch, base) pairs a careless or hostile caller may give; each must be refused.
HOSTILE = [
    ("-D", "feature"), ("-M", "f3"), ("-f", None), (None, "--no-checkout"), ("--lock", None), (None, "--lock"),
    ("-f", "-q"), ("-q", None), (None, "-f"), ("--orphan", None), (None, "--detach"), ("@{-1}", None),
    ("a..b", None), ("feature", None), ("x", "no-such-ref"), ("x", "feature:README"), ("", "--quiet"),
    ("b" * 256, None), (None, "main" + "^0" * 200),
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main, and the branches feature (with a commit main lacks) and f3 that an option could hit."""
    path = make_repo(tmp_path / "repo", {"README": "hello\n"})
    git(path, "checkout", "-qb", "feature")
    (path / "feature.txt").write_text("unmerged work\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "feature work")
    git(path, "branch", "f3", "main")
    git(path, "checkout", "-q", "main")
    return path


def state(repo: Path) -> tuple[str, str, list[str]]:
    """Every ref with its commit, every worktree, and the main checkout's files."""
    return (git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
            git(repo, "worktree", "list", "--porcelain"), sorted(p.name for p in repo.iterdir()))


@pytest.mark.parametrize(("branch", "base"), HOSTILE)
def test_an_option_like_or_bad_name_is_refused_through_the_protocol(
        daemon: DaemonHarness, repo: Path, branch: str | None, base: str | None) -> None:
    before = state(repo)
    args = {k: v for k, v in (("branch", branch), ("base", base)) if v is not None}
    with pytest.raises(ClientError) as refused:
        daemon.spawn("say never", cwd=str(repo), worktree=True, **args)
    assert refused.value.code == "bad_args"
    message = refused.value.message
    assert any(repr(given) in message for given in (branch, base) if given) or "over the 255-character cap" in message
    assert state(repo) == before
    assert daemon.call("status")["jobs"] == 0


def roost(daemon: DaemonHarness, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, cwd=cwd, capture_output=True,
                          text=True)


def test_the_cli_refuses_them_and_changes_nothing(daemon: DaemonHarness, repo: Path) -> None:
    before = state(repo)
    for args in (["--branch", "-D", "--base", "feature"], ["--branch", "-M", "--base", "f3"], ["--branch", "-f"],
                 ["--base=--no-checkout"], ["--branch=--lock"], ["--base", "-q"]):
        done = roost(daemon, repo, "spawn", "--worktree", *args, "say never")
        assert done.returncode != 0 and ("starts with '-'" in done.stderr or "does not name a commit" in done.stderr), \
            (args, done.stderr)
        assert state(repo) == before
    assert (repo / "feature.txt").exists() is False and git(repo, "log", "-1", "--format=%s", "feature") == \
        "feature work\n"


def test_a_job_cannot_do_it_from_its_shell_either(daemon: DaemonHarness, repo: Path) -> None:
    before = state(repo)
    cli = f"{sys.executable} -m roost.cli"
    row = daemon.wait_state(daemon.spawn(
        f"run {cli} spawn --worktree --branch -D --base feature 'say x'\n", cwd=str(repo)), "idle", "failed")
    assert row["state"] == "failed" and "starts with '-'" in row["reason"]
    row = daemon.wait_state(daemon.spawn(
        f"run {cli} spawn --worktree --base=--no-checkout 'say x'\n", cwd=str(repo)), "idle", "failed")
    assert row["state"] == "failed" and "does not name a commit" in row["reason"]
    assert state(repo) == before
    assert daemon.call("status")["jobs"] == 2  # the two jobs; no child was made


def test_a_good_name_and_base_still_work(daemon: DaemonHarness, repo: Path) -> None:
    job = daemon.spawn("say hi", cwd=str(repo), worktree=True, branch="topic/one", base="feature")
    row = daemon.wait_state(job, "idle")
    assert row["branch"] == "topic/one" and row["base"] == "feature"
    assert (Path(row["worktree"]) / "feature.txt").exists()


def test_a_base_that_is_not_a_branch_is_kept_as_its_commit(daemon: DaemonHarness, repo: Path) -> None:
    row = daemon.wait_state(daemon.spawn("write a.txt a\nrun git add -A && git commit -qm a", cwd=str(repo),
                                         worktree=True, base="HEAD"), "idle")
    assert row["base"] == git(repo, "rev-parse", "main").strip()  # not "HEAD": that would be the worktree's own
    listed = next(r for r in daemon.call("worktrees")["rows"] if r["job"] == row["id"])
    assert listed["ahead"] == 1 and listed["merged"] is False
