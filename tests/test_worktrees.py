"""Each job in its own git worktree, with real git repositories made by the tests and a real daemon:
spawn, setup, archive, prune, a worktree deleted by hand, diff and merge (docs/worktrees.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from roost.client import ClientError
from roost.daemon.git import diffs
from tests.conftest import DaemonHarness
from tests.gitrepo import daemon_logging_git, git, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit on main, and an identity for the commits the tests make."""
    return make_repo(tmp_path / "repo", {"README": "hello\n", ".gitignore": "from-setup.txt\n"})


def commit(path: Path, name: str, text: str, message: str) -> None:
    (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", message)


def spawn_in(daemon: DaemonHarness, repo: Path, prompt: str, **args: object) -> dict:
    """Spawn a worktree job and wait for its turn to end; its row."""
    job = daemon.spawn(prompt, cwd=str(repo), worktree=True, **args)
    return daemon.wait_state(job, "idle", "done", "failed")


def entries(daemon: DaemonHarness, job: str, kind: str) -> list[dict]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == kind]


def test_spawn_with_worktree_runs_the_agent_there_on_its_own_branch(daemon: DaemonHarness, repo: Path) -> None:
    row = spawn_in(daemon, repo, "write notes.txt from the agent")
    assert row["state"] == "idle"
    path = Path(row["worktree"])
    assert row["branch"] == f"roost/{row['id']}" and row["base"] == "main" and row["repo"] == str(repo)
    assert path == daemon.paths.state_dir / "worktrees" / row["id"] and row["cwd"] == str(path)
    assert (path / "notes.txt").read_text() == "from the agent\n"
    assert not (repo / "notes.txt").exists()
    assert git(path, "branch", "--show-current").strip() == row["branch"]


def test_two_jobs_write_the_same_file_in_their_own_worktrees(daemon: DaemonHarness, repo: Path) -> None:
    first = daemon.spawn("work 0.3\nwrite same.txt one", cwd=str(repo), worktree=True)
    second = daemon.spawn("work 0.3\nwrite same.txt two", cwd=str(repo), worktree=True)
    rows = [daemon.wait_state(j, "idle") for j in (first, second)]
    assert [(Path(r["worktree"]) / "same.txt").read_text() for r in rows] == ["one\n", "two\n"]


def test_a_child_works_in_its_parents_worktree_unless_it_asks(daemon: DaemonHarness, repo: Path) -> None:
    parent = spawn_in(daemon, repo, "spawn write from-child.txt hi\nwait-children")
    child = daemon.children(parent["id"])[0]
    assert child["cwd"] == parent["worktree"] and child["worktree"] is None
    assert (Path(parent["worktree"]) / "from-child.txt").exists()


def test_a_child_that_asks_gets_its_own_worktree_from_its_parents_branch(daemon: DaemonHarness, repo: Path) -> None:
    parent = spawn_in(daemon, repo, "write p.txt parent\nrun git add -A && git commit -qm p")
    child = daemon.wait_state(daemon.spawn("write c.txt child", parent=parent["id"], cwd=parent["worktree"], worktree=True), "idle")
    assert child["base"] == parent["branch"] and child["repo"] == str(repo)
    assert (Path(child["worktree"]) / "p.txt").exists() and not (Path(parent["worktree"]) / "c.txt").exists()


def test_a_cwd_outside_a_git_repository_is_refused(daemon: DaemonHarness, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ClientError) as refused:
        daemon.spawn("say hi", cwd=str(plain), worktree=True)
    assert refused.value.code == "bad_args" and "is not inside a git repository" in refused.value.message
    with pytest.raises(ClientError, match="need|give worktree"):
        daemon.spawn("say hi", cwd=str(plain), branch="x")


def test_copy_setup_and_teardown(daemon_factory: Callable[[str], DaemonHarness], repo: Path) -> None:
    (repo / ".env").write_text("SECRET=1\n")  # untracked: only the copy brings it
    daemon = daemon_factory('[worktree]\ncopy = [".env"]\nsetup = ["cat .env > from-setup.txt"]\n'
                            'teardown = ["touch \\"$ROOST_REPO/torn-$ROOST_JOB_ID\\""]\n')
    row = spawn_in(daemon, repo, "run cat from-setup.txt")
    path = Path(row["worktree"])
    assert (path / ".env").read_text() == "SECRET=1\n" and "SECRET=1" in daemon.texts(row["id"])
    daemon.call("archive", job=row["id"])  # the copied .env and the ignored setup output are not unsaved work
    daemon.wait_row(row["id"], lambda r: r["worktree"] is None)
    assert not path.exists() and (repo / f"torn-{row['id']}").exists()


def test_a_failing_setup_fails_the_job_with_its_output_and_starts_nothing(
        daemon_factory: Callable[[str], DaemonHarness], repo: Path) -> None:
    daemon = daemon_factory('[worktree]\nsetup = ["echo the lockfile is broken; exit 3"]\n')
    row = spawn_in(daemon, repo, "say never")
    assert row["state"] == "failed"
    assert "code 3" in row["reason"] and "the lockfile is broken" in row["reason"]
    assert not entries(daemon, row["id"], "worker") and "never" not in daemon.texts(row["id"])


def test_archive_removes_a_clean_merged_worktree_and_keeps_a_dirty_one(daemon: DaemonHarness, repo: Path) -> None:
    merged = spawn_in(daemon, repo, "write a.txt a\nrun git add -A && git commit -qm a")
    assert daemon.call("merge", job=merged["id"])["outcome"] == "fast-forward"
    dirty = spawn_in(daemon, repo, "write b.txt b")
    for job in (merged, dirty):
        daemon.call("archive", job=job["id"])
    gone = daemon.wait_row(merged["id"], lambda r: r["worktree"] is None)
    assert gone["branch"] is None and not Path(merged["worktree"]).exists()
    assert f"roost/{merged['id']}" not in git(repo, "branch")
    kept = daemon.wait_for(lambda: entries(daemon, dirty["id"], "worktree"), what="the dirty job's note")
    assert "kept its worktree" in kept[0]["message"] and "b.txt" in kept[0]["message"]
    assert (Path(dirty["worktree"]) / "b.txt").exists()


def test_prune_removes_what_is_safe_and_says_what_it_kept(daemon: DaemonHarness, repo: Path) -> None:
    dirty = spawn_in(daemon, repo, "write b.txt b")
    live = spawn_in(daemon, repo, "say still here")
    daemon.call("archive", job=dirty["id"])
    daemon.wait_for(lambda: entries(daemon, dirty["id"], "worktree"), what="the kept note")
    result = daemon.call("worktrees_prune")
    assert {k["job"] for k in result["kept"]} == {dirty["id"], live["id"]} and not result["removed"]
    (Path(dirty["worktree"]) / "b.txt").unlink()  # a person cleaned it up: now nothing is unsaved
    result = daemon.call("worktrees_prune")
    assert [r["job"] for r in result["removed"]] == [dirty["id"]]
    daemon.wait_row(dirty["id"], lambda r: r["worktree"] is None)


def test_a_worktree_deleted_by_hand_is_noticed(daemon: DaemonHarness, repo: Path) -> None:
    row = spawn_in(daemon, repo, "say hi")
    git(Path(row["worktree"]), "checkout", "-q", "--detach")
    commit(Path(row["worktree"]), "lost.txt", "mine\n", "on a detached HEAD, then the directory was deleted")
    made = git(Path(row["worktree"]), "rev-parse", "HEAD").strip()
    shutil.rmtree(row["worktree"])
    listed = daemon.call("worktrees")["rows"]
    assert [(r["job"], r["exists"]) for r in listed] == [(row["id"], False)]
    daemon.wait_row(row["id"], lambda r: r["worktree"] is None)
    assert "deleted by hand" in entries(daemon, row["id"], "worktree")[0]["message"]
    assert row["worktree"] not in git(repo, "worktree", "list")
    assert git(repo, "for-each-ref", "--contains", made, "--format=%(refname)") == f"refs/roost/archive/{row['id']}\n"
    daemon.call("send", job=row["id"], text="say again")  # it takes messages; nothing crashed
    assert daemon.call("status")["jobs"] == 1


def test_diff_shows_committed_uncommitted_and_new_files_paged(daemon: DaemonHarness, repo: Path) -> None:
    row = spawn_in(daemon, repo, "write a.txt committed\nrun git add -A && git commit -qm a\nwrite README changed")
    path = Path(row["worktree"])
    (path / "big.txt").write_text("".join(f"line {i} é\n" for i in range(100000)))  # over one page
    first = daemon.call("diff", job=row["id"])
    assert {f["path"]: f["added"] for f in first["files"]} == {"a.txt": 1, "README": 1, "big.txt": 100000}
    assert first["next"] is not None
    text, page = first["text"], first
    while page["next"] is not None:
        page = daemon.call("diff", job=row["id"], offset=page["next"])
        text += page["text"]
    assert len(text.encode()) == first["size"] > diffs.PAGE_MAX
    assert "+committed" in text and "-hello" in text and "+line 99999 é" in text
    out = subprocess.run([sys.executable, "-m", "roost.cli", "diff", row["id"]], env=daemon.env, capture_output=True,
                         text=True, check=True).stdout
    assert out == text


def test_merge_fast_forward_clean_and_conflicting(daemon: DaemonHarness, repo: Path) -> None:
    clean = spawn_in(daemon, repo, "write a.txt a\nrun git add -A && git commit -qm a")
    clash = spawn_in(daemon, repo, "write README theirs\nrun git commit -qam theirs")
    commit(repo, "b.txt", "b\n", "main moves on")
    merged = daemon.call("merge", job=clean["id"])
    assert merged["outcome"] == "merged" and (repo / "a.txt").exists() and merged["where"] == str(repo)
    commit(repo, "README", "ours\n", "ours")
    with pytest.raises(ClientError) as refused:
        daemon.call("merge", job=clash["id"])
    assert refused.value.code == "refused" and "conflicts in README" in refused.value.message
    assert (repo / "README").read_text() == "ours\n" and not git(repo, "status", "--porcelain", "-uno")
    (repo / "README").write_text("uncommitted\n")
    with pytest.raises(ClientError, match="uncommitted changes: README"):
        daemon.call("merge", job=clean["id"])


def test_the_cli_lists_worktrees(daemon: DaemonHarness, repo: Path) -> None:
    row = spawn_in(daemon, repo, "write a.txt a")

    def roost(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, capture_output=True,
                              text=True, check=True).stdout

    listed = roost("worktrees")
    assert row["id"] in listed and row["branch"] in listed and "1 untracked" in listed
    assert "a.txt" in roost("diff", "--stat", row["id"])


def test_diff_names_are_read_whole_with_z(daemon: DaemonHarness, repo: Path) -> None:
    row = spawn_in(daemon, repo, "say hi")
    path = Path(row["worktree"])
    names = ["a\ttab.txt", "é non-ascii.txt", "new\nline.txt", "sp ace.txt"]
    for i, name in enumerate(names):
        (path / name).write_text(f"file {i}\n")
    page = daemon.call("diff", job=row["id"])
    assert sorted(f["path"] for f in page["files"]) == sorted(names)
    for i in range(len(names)):
        assert f"+file {i}\n" in page["text"]
    assert "+++ b/é non-ascii.txt" in page["text"] and '+++ "b/a\\ttab.txt"' in page["text"]


def test_diff_pages_come_from_one_snapshot_of_one_state(daemon: DaemonHarness, repo: Path) -> None:
    row = spawn_in(daemon, repo, "say hi")
    path = Path(row["worktree"])
    (path / "big.txt").write_text("".join(f"line {i}\n" for i in range(100000)))  # over one page
    first = daemon.call("diff", job=row["id"])
    assert first["next"] is not None and daemon.call("diff", job=row["id"])["snapshot"] == first["snapshot"]
    (path / "big.txt").write_text("changed\n")
    second = daemon.call("diff", job=row["id"], offset=first["next"], snapshot=first["snapshot"])
    assert "+line 90000\n" in second["text"]  # the reader's snapshot still pages, as it was
    assert daemon.call("diff", job=row["id"])["snapshot"] != first["snapshot"]  # a new state, a new snapshot
    for i in range(diffs.SNAPSHOTS_MAX):  # the cache lets the first go ...
        (path / "big.txt").write_text(f"state {i}\n")
        daemon.call("diff", job=row["id"])
    with pytest.raises(ClientError, match="changed since its first page"):  # ... and its state is gone
        daemon.call("diff", job=row["id"], offset=first["next"], snapshot=first["snapshot"])
    assert len(list((daemon.paths.state_dir / "diffs").iterdir())) == diffs.SNAPSHOTS_MAX


def test_diff_pages_of_escaped_text_and_long_file_lists_stay_under_the_frame(daemon: DaemonHarness,
                                                                              repo: Path) -> None:
    row = spawn_in(daemon, repo, "say hi")
    path = Path(row["worktree"])
    (path / "esc.txt").write_bytes((b"\x1b\x01" * 60 + b"\n") * 20000)  # 2.4 MB that JSON writes 6x longer
    for i in range(2100):
        (path / f"{'n' * 150}{i:05d}.txt").write_text("x\n")
    page, text, pages = daemon.call("diff", job=row["id"]), "", 0
    assert len(page["files"]) < 2100 and len(page["files"]) + page["files_more"] == 2101
    while True:
        text, pages = text + page["text"], pages + 1
        if page["next"] is None:
            break
        page = daemon.call("diff", job=row["id"], offset=page["next"], snapshot=page["snapshot"])
    assert len(text.encode()) == page["size"] and text.count("\x1b\x01" * 60) == 20000 and pages > 3


def test_merge_never_puts_the_title_on_a_command_line(roost_home: Path, tmp_path: Path, repo: Path) -> None:
    with daemon_logging_git(roost_home, tmp_path) as (daemon, calls):
        title = "a title only the merge message may hold"
        row = spawn_in(daemon, repo, "write a.txt a\nrun git add -A && git commit -qm a", title=title)
        commit(repo, "b.txt", "b\n", "main moves on")
        assert daemon.call("merge", job=row["id"])["outcome"] == "merged"
        assert title in git(repo, "log", "-1", "--format=%B")
        logged = calls.read_text()
        assert "merge --no-ff" in logged and title not in logged
