"""Search across every job's timeline and forking a job, with the real daemon and built-in workers
(and real git for a fork with a worktree of its own)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roost.client import ClientError
from roost.daemon.storage import search as search_mod
from tests.conftest import DaemonHarness, environ_of
from tests.gitrepo import git, make_repo


def finds(daemon: DaemonHarness, text: str, **args: object) -> dict:
    with daemon.client() as client:
        return client.search(text, **args)


def test_search_finds_words_in_several_jobs_transcripts_newest_first_with_the_match_marked(daemon):
    one = daemon.spawn("say the pelican flies at dawn")
    two = daemon.spawn("say a quiet pelican sleeps")
    other = daemon.spawn("say nothing of birds")
    for job in (one, two, other):
        daemon.wait_state(job, "idle", "done")
    page = finds(daemon, "pelican")
    said = [r for r in page["results"] if r["kind"] == "text"]
    assert {r["job"] for r in said} == {one, two}
    assert {r["job"] for r in page["results"]} == {one, two}, "the prompts match too, never the other job"
    seqs = [r["seq"] for r in page["results"]]
    assert seqs == sorted(seqs, reverse=True)
    for result in page["results"]:
        start, end = result["marks"][0]
        assert result["text"][start:end].lower() == "pelican"
        assert result["title"] and result["ts"] > 0
    assert page["next"] is None and page["indexing"] == 0
    [both] = [r for r in finds(daemon, "quiet pelican")["results"] if r["kind"] == "text"]
    assert both["job"] == two and len(both["marks"]) == 2
    assert finds(daemon, "pelic*")["results"], "a trailing * matches a prefix"


def test_search_opens_at_the_entry_it_found(daemon):
    job = daemon.spawn("say first line\nsay the heron waits\nsay last line")
    daemon.wait_state(job, "idle", "done")
    [hit] = [r for r in finds(daemon, "heron")["results"] if r["kind"] == "text"]
    page = daemon.call("logs", job=job, after=hit["seq"] - 1, limit=1)
    assert page["entries"][0]["seq"] == hit["seq"]
    assert page["entries"][0]["data"]["text"] == "the heron waits"


def test_an_archived_job_is_searched_only_when_asked(daemon):
    kept = daemon.spawn("say the osprey hunts")
    gone = daemon.spawn("say an osprey nests")
    daemon.wait_state(kept, "idle", "done")
    daemon.wait_state(gone, "idle", "done")
    daemon.call("archive", job=gone)
    assert {r["job"] for r in finds(daemon, "osprey")["results"]} == {kept}
    assert {r["job"] for r in finds(daemon, "osprey", archived=True)["results"]} == {kept, gone}


def test_search_pages_at_its_limit_and_past_it(daemon):
    job = daemon.spawn("\n".join(f"say egret number {i}" for i in range(7)))
    daemon.wait_state(job, "idle", "done")
    total = len(finds(daemon, "egret", limit=100)["results"])
    assert total == 8  # seven said, and the prompt
    seen: list[int] = []
    before = None
    while True:
        page = finds(daemon, "egret", limit=3, before=before)
        assert len(page["results"]) <= 3
        seen += [r["seq"] for r in page["results"]]
        before = page["next"]
        if before is None:
            break
    assert len(seen) == total == len(set(seen))
    exact = finds(daemon, "egret", limit=total)
    assert len(exact["results"]) == total and exact["next"] is None, "a page exactly full has no next"
    with pytest.raises(ClientError, match="between 1 and 100"):
        finds(daemon, "egret", limit=101)


def test_bad_queries_are_refused_saying_what_was_wrong(daemon):
    with pytest.raises(ClientError, match="give some words"):
        finds(daemon, "   ")
    with pytest.raises(ClientError, match=f"at most {search_mod.QUERY_MAX} characters"):
        finds(daemon, "x" * (search_mod.QUERY_MAX + 1))
    with pytest.raises(ClientError, match=f"at most {search_mod.WORDS_MAX} words"):
        finds(daemon, " ".join(["w"] * (search_mod.WORDS_MAX + 1)))
    assert finds(daemon, 'AND OR NOT "( * ^')["results"] == [], "FTS5 syntax is taken as words"


def test_a_snippet_is_bounded_however_long_the_entry(daemon):
    word = "y" * 5000
    job = daemon.spawn(f"say kestrel {word}")
    daemon.wait_state(job, "idle", "done")
    for result in finds(daemon, "kestrel")["results"]:
        assert len(result["text"]) <= search_mod.SNIPPET_CHARS


def test_a_job_searches_only_within_its_subtree(daemon_factory):
    daemon = daemon_factory("subagent_auto_close = false\n")
    parent = daemon.spawn("spawn say plover below\nsay plover here")
    child = daemon.wait_for(lambda: daemon.children(parent), what="the child")[0]["id"]
    stranger = daemon.spawn("say plover elsewhere")
    for job in (parent, child, stranger):
        daemon.wait_state(job, "idle", "done")
    daemon.wait_for(lambda: {r["job"] for r in finds(daemon, "plover")["results"]} == {parent, child, stranger},
                    what="every job's plover")
    token = environ_of(daemon.show(parent)["pid"])["ROOST_TOKEN"]
    with daemon.client(job=parent, token=token) as as_parent:
        assert {r["job"] for r in as_parent.search("plover")["results"]} == {parent, child}
        assert {r["job"] for r in as_parent.search("plover", under=child)["results"]} == {child}
        with pytest.raises(ClientError) as refused:
            as_parent.search("plover", under=stranger)
        assert refused.value.code == "auth"
    assert {r["job"] for r in finds(daemon, "plover", under=parent)["results"]} == {parent, child}


def test_cli_search_prints_lines_and_json(daemon):
    job = daemon.spawn("say the curlew calls")
    daemon.wait_state(job, "idle", "done")
    env = daemon.env
    out = subprocess.run([sys.executable, "-m", "roost.cli", "search", "curlew"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"{job}  " in out.stdout and "[curlew]" in out.stdout
    as_json = subprocess.run([sys.executable, "-m", "roost.cli", "search", "--json", "curlew"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert {r["job"] for r in json.loads(as_json.stdout)["results"]} == {job}
    nothing = subprocess.run([sys.executable, "-m", "roost.cli", "search", "zzzqqq"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert nothing.returncode == 0 and "nothing matches" in nothing.stderr


def test_an_old_store_is_indexed_in_the_background_at_start(daemon):
    job = daemon.spawn("say the avocet wades")
    daemon.wait_state(job, "idle", "done")
    daemon.stop()
    db = sqlite3.connect(daemon.paths.store)
    db.execute("DROP TABLE timeline_fts")  # a store made before search
    db.commit()
    db.close()
    daemon.start()
    daemon.wait_for(lambda: finds(daemon, "avocet")["indexing"] == 0, what="the old entries to be indexed")
    assert {r["job"] for r in finds(daemon, "avocet")["results"]} == {job}


# -- fork ---------------------------------------------------------------------------------------------------
def test_a_fork_of_a_builtin_job_keeps_its_history_and_the_source_goes_on_alone(daemon):
    source = daemon.spawn("say remember the lapwing")
    first = daemon.wait_state(source, "idle", "done")
    before = Path(first["session"]).read_bytes()
    with daemon.client() as client:
        row = client.fork(source)
    forked = row["id"]
    assert forked != source and row["state"] == "idle" and not row["worker_up"], "a fork waits for a message"
    assert daemon.show(forked)["parent"] is None and row["title"].startswith("fork of ")
    assert daemon.call("send", job=forked, text="recall")["outcome"] == "resumed"
    again = daemon.wait_row(forked, lambda r: r["state"] == "idle" and "earlier prompts" in r["last_text"])
    assert "say remember the lapwing" in again["last_text"], "the fork knows the conversation so far"
    assert again["session"] != first["session"]
    assert Path(first["session"]).read_bytes() == before, "the source's session is untouched"
    notes = [e["data"] for e in daemon.timeline(forked) if e["kind"] == "spawned"]
    assert notes[0]["forked_from"] == source


def test_a_fork_with_a_prompt_starts_on_it(daemon):
    source = daemon.spawn("say one")
    daemon.wait_state(source, "idle", "done")
    forked = daemon.call("fork", job=source, prompt="recall", title="second try")["id"]
    row = daemon.wait_row(forked, lambda r: "earlier prompts" in r["last_text"])
    assert "say one" in row["last_text"] and row["title"] == "second try"


def test_an_archived_job_is_not_forked(daemon):
    source = daemon.spawn("say one")
    daemon.wait_state(source, "idle", "done")
    daemon.call("archive", job=source)
    with pytest.raises(ClientError, match="archived"):
        daemon.call("fork", job=source)


def tree_hash(path: Path) -> str:
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if ".git" not in p.parts):
        digest.update(str(item.relative_to(path)).encode())
        if item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_fork_worktree_carries_uncommitted_changes_and_leaves_the_source_untouched(daemon, tmp_path):
    repo = make_repo(tmp_path / "repo", {"README": "hello\n", "kept.txt": "old\n"})
    source = daemon.spawn("write kept.txt changed\nwrite new.txt brand new", cwd=str(repo), worktree=True)
    row = daemon.wait_state(source, "idle", "done")
    work = Path(row["worktree"])
    (work / "staged.txt").write_text("staged\n")
    git(work, "add", "staged.txt")
    status, head, index_hash = git(work, "status", "--porcelain"), git(work, "rev-parse", "HEAD"), tree_hash(work)
    stashes = git(repo, "stash", "list")
    forked = daemon.call("fork", job=source, worktree=True)["id"]
    fork_row = daemon.show(forked)
    there = Path(fork_row["worktree"])
    assert there != work and fork_row["branch"] == f"roost/{forked}"
    assert (there / "kept.txt").read_text() == "changed\n"
    assert (there / "new.txt").read_text() == "brand new\n", "untracked files come too"
    assert (there / "staged.txt").read_text() == "staged\n"
    assert "A  staged.txt" in git(there, "status", "--porcelain"), "what was staged is staged in the fork"
    assert git(work, "status", "--porcelain") == status and git(work, "rev-parse", "HEAD") == head
    assert tree_hash(work) == index_hash and git(repo, "stash", "list") == stashes, "the source is untouched"
    assert fork_row["base"] == row["base"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_fork_worktree_of_a_job_outside_git_is_refused_saying_so(daemon, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    source = daemon.spawn("say hi", cwd=str(plain))
    daemon.wait_state(source, "idle", "done")
    with pytest.raises(ClientError, match="not a git checkout"):
        daemon.call("fork", job=source, worktree=True)
    assert [p.name for p in daemon.paths.sessions_dir.glob("*.jsonl")] == [f"{source}.jsonl"], \
        "a refused fork leaves no copy of the session behind"
    assert [r["id"] for r in daemon.rows()] == [source]


def test_a_forks_title_and_prompt_are_checked_before_anything_is_made(daemon):
    source = daemon.spawn("say one")
    daemon.wait_state(source, "idle", "done")
    with pytest.raises(ClientError, match="201 characters, over the 200-character cap"):
        daemon.call("fork", job=source, title="t" * 201)
    with pytest.raises(ClientError, match="limit for one prompt"):
        daemon.call("fork", job=source, prompt="p" * (1024 * 1024 - 2048))  # fits a frame, not a prompt
    assert [r["id"] for r in daemon.rows()] == [source]
    assert daemon.call("fork", job=source, title="t" * 200)["title"] == "t" * 200


def test_cli_fork_prints_the_new_jobs_id(daemon):
    source = daemon.spawn("say one")
    daemon.wait_state(source, "idle", "done")
    out = subprocess.run([sys.executable, "-m", "roost.cli", "fork", "--title", "again", source, "recall"],
                         env=daemon.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    forked = out.stdout.strip()
    row = daemon.wait_row(forked, lambda r: "earlier prompts: say one" in r["last_text"])
    assert row["title"] == "again"
    gone = subprocess.run([sys.executable, "-m", "roost.cli", "fork", "nope"], env=daemon.env, capture_output=True,
                          text=True, timeout=60)
    assert gone.returncode == 2 and "no job with id 'nope'" in gone.stderr
