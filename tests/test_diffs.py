"""The diff snapshots in process (roost/daemon/git/diffs.py), with real git: the cut at DIFF_MAX at and
past it, the numstat list however git's output is split, a page's JSON within its budget."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from roost.daemon.git import diffs
from roost.daemon.git.diffs import DiffCache, Snapshot, Source, _Numstat, read_page
from tests.gitrepo import git, make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def snapshot_of(repo: Path, where: Path, state: str) -> Snapshot:
    source = Source("j1", str(repo), (git(repo, "rev-parse", "HEAD").strip(),), repo / ".git" / "index")
    return asyncio.run(DiffCache(where).snapshot(state, source))


def test_a_diff_is_cut_past_diff_max_and_whole_at_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo", {"README": "hello\n"})
    (repo / "new.txt").write_text("x\n" * 5000)
    whole = snapshot_of(repo, tmp_path / "a", "whole")
    assert not whole.cut and whole.files == [{"path": "new.txt", "added": 5000, "deleted": 0}]
    monkeypatch.setattr(diffs, "DIFF_MAX", whole.size)
    at = snapshot_of(repo, tmp_path / "b", "at")
    assert (at.size, at.cut) == (whole.size, False)
    monkeypatch.setattr(diffs, "DIFF_MAX", whole.size - 1)
    past = snapshot_of(repo, tmp_path / "c", "past")
    assert (past.size, past.cut) == (whole.size - 1, True)
    assert past.file.read_bytes() == whole.file.read_bytes()[:-1]
    assert git(repo, "status", "--porcelain") == "?? new.txt\n"  # the real index never had it


@pytest.mark.parametrize("step", [1, 3, 7, 1 << 20])
def test_the_numstat_list_however_it_is_split(step: int) -> None:
    out = (b"1\t2\ta\tb.txt\0-\t-\tbin.dat\0" b"3\t0\t\0old name\0new\nname\0" b"\0" b"diff --git a/x b/x\n")
    listing, text = _Numstat(), b""
    for at in range(0, len(out), step):
        chunk = out[at:at + step]
        text += listing.feed(chunk) if not listing.done else chunk
    assert listing.files == [{"path": "a\tb.txt", "added": 1, "deleted": 2},
                             {"path": "bin.dat", "added": None, "deleted": None},
                             {"path": "new\nname", "added": 3, "deleted": 0}]
    assert text == b"diff --git a/x b/x\n"


def test_a_page_of_escaped_text_fits_its_budget(tmp_path: Path) -> None:
    body = (b"\x1b[31m" + "é".encode() * 20 + b"\xff\"\\\n") * 40000
    (tmp_path / "d").write_bytes(body)
    snap = Snapshot("x", "j1", tmp_path / "d", len(body), False, page_json=100_000)
    offset, pages, text = 0, 0, b""
    while offset < snap.size:
        start, end, page = read_page(snap, offset)
        as_json = json.dumps(page.decode(errors="replace"), ensure_ascii=False).encode()
        assert start == offset and len(as_json) <= 100_000
        text, offset, pages = text + page, end, pages + 1
    assert text == body and pages > len(body) // 100_000
