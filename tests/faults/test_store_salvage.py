"""The salvage reads every page that is still whole (issue 18): damage at a table's root page, in
one leaf, in an overflow chain, or in the main file of a store whose records are in its
write-ahead log loses only the records on the damaged pages, and the notice counts what came
back. Every file is owner-only, and nothing but the damaged file itself is left beside the store."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

from roost import paths as paths_mod
from roost.daemon.storage.store import Store
from roost.daemon.storage.pages import LeafScan, PageFile
from roost.models import Job, State

from conftest import DaemonHarness
from test_store import asides, seed

PAGE = 4096


def job_page(path: Path, job_id: str) -> int:
    """The page holding the start of the job's row in the jobs table (its id, then its record:
    bytes found nowhere else in the file), read from the file as bytes."""
    data = path.read_bytes()
    at = data.find(job_id.encode() + b'{"id":')
    assert at >= 0 and data.find(job_id.encode() + b'{"id":', at + 1) < 0, job_id
    return at // PAGE + 1


def garbage(path: Path, page: int, pages: int = 1) -> None:
    with open(path, "r+b") as fh:
        fh.seek((page - 1) * PAGE)
        fh.write(b"\xff" * PAGE * pages)


def leaf_pages(path: Path, table: str) -> list[int]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in db.execute("SELECT pageno FROM dbstat WHERE name=? AND pagetype='leaf'", (table,))]
    finally:
        db.close()


def root_page(path: Path, table: str) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (table,)).fetchone()[0]
    finally:
        db.close()


def started(home: Path) -> DaemonHarness:
    daemon = DaemonHarness(home)
    daemon.write_config("")
    daemon.start()
    return daemon


def test_garbage_over_the_jobs_tables_root_page_loses_no_record(roost_home: Path) -> None:
    """The issue's case: 8 KB of garbage at offset 8 KB (the jobs table's root) found 0 of 13."""
    path = seed(roost_home, 13)
    assert root_page(path, "jobs") in (3, 4), "the stretch below holds the jobs table's root"
    with open(path, "r+b") as fh:
        fh.seek(8192)
        fh.write(os.urandom(8192))
    daemon = started(roost_home)
    try:
        rows = daemon.rows()
        assert sorted(r["id"] for r in rows) == [f"j{i:04d}" for i in range(13)]
        assert all(r["title"] == f"job {int(r['id'][1:])}" for r in rows)
        assert daemon.show("j0007")["last_text"].startswith("y" * 100)
        notice = daemon.call("status")["store_notice"]
        assert "13 job records, 13 timeline entries" in notice and "salvaged" in notice
        assert len(daemon.timeline("j0005")) >= 1, "timelines come back too"
        with daemon.client() as client:  # and they are searchable once indexed again
            daemon.wait_for(lambda: len(client.search("zzz*", archived=True, limit=100)["results"]) == 13,
                            what="the salvaged entries in the search index")
    finally:
        daemon.stop()


def test_a_damaged_leaf_loses_only_the_records_on_it(roost_home: Path) -> None:
    path = seed(roost_home, 300)
    pages = {f"j{i:04d}": job_page(path, f"j{i:04d}") for i in range(300)}
    leaves = leaf_pages(path, "jobs")
    assert set(pages.values()) <= set(leaves) and len(leaves) > 10
    hit = pages["j0150"]
    garbage(path, hit)
    daemon = started(roost_home)
    try:
        back = {r["id"] for r in daemon.rows()}
        expected = {j for j, page in pages.items() if page != hit}
        assert back == expected, f"missing: {sorted(expected - back)[:5]}, extra: {sorted(back - expected)[:5]}"
        assert 250 < len(back) < 300
        assert f"{len(expected)} job records" in daemon.call("status")["store_notice"]
    finally:
        daemon.stop()


def test_a_damaged_overflow_page_loses_only_its_record(roost_home: Path) -> None:
    path = seed(roost_home, 20)
    big = "".join(f"<{i:06d}>" for i in range(4000))  # 32 KB: a chain of overflow pages
    store = Store(path)
    with store.transaction():
        for job_id, text in (("jbig", big), ("jwhole", big.replace("<", "["))):
            store.save_job(Job(id=job_id, title=job_id, driver="builtin", cwd="/", state=State.DONE,
                               created_at=2000.0, state_since=2000.0, last_text=text))
    store.close()
    data = path.read_bytes()
    middle = data.find(b"<002000>")
    assert middle > 0 and job_page(path, "jbig") != middle // PAGE + 1, "the middle of it is on an overflow page"
    garbage(path, middle // PAGE + 1)
    daemon = started(roost_home)
    try:
        back = {r["id"] for r in daemon.rows()}
        assert back == {f"j{i:04d}" for i in range(20)} | {"jwhole"}, "every other record, no garbled big one"
        store_text = daemon.call("status")["store_notice"]
        assert "21 job records" in store_text and "could not be read" in store_text
    finally:
        daemon.stop()
    store = Store(path)
    try:
        [whole] = [job for job in store.jobs() if job.id == "jwhole"]
        assert whole.last_text == big.replace("<", "["), "a record over its own intact overflow chain comes back whole"
    finally:
        store.close()


def test_rows_deleted_before_the_damage_do_not_come_back(roost_home: Path) -> None:
    """Their pages went to the freelist, where SQLite leaves their old bytes: they are skipped."""
    path = seed(roost_home, 400)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA secure_delete=OFF")  # some builds zero freed pages; a store from others need not
    db.execute("DELETE FROM jobs WHERE id < 'j0300'")
    assert db.execute("PRAGMA freelist_count").fetchone()[0] > 10
    db.close()
    stale = set(re.findall(rb"j0[0-2]\d\d(?=\{)", path.read_bytes()))
    assert len(stale) > 100, "most deleted rows' bytes are still in the file"
    garbage(path, root_page(path, "jobs"))
    daemon = started(roost_home)
    try:
        assert sorted(r["id"] for r in daemon.rows()) == [f"j{i:04d}" for i in range(300, 400)]
    finally:
        daemon.stop()


WRITER = """
import os, sys
from roost.daemon.storage.store import Store
from roost.daemon.storage.pages import LeafScan, PageFile
from roost.models import Job, State
store = Store(__import__("pathlib").Path(sys.argv[1]))
with store.transaction():
    for i in range(40):
        store.save_job(Job(id=f"w{i:03d}", title=f"wal {i}", driver="builtin", cwd="/", state=State.DONE,
                           created_at=1.0 + i, state_since=1.0 + i))
os._exit(0)  # no close, no checkpoint: the records are only in the -wal
"""


def test_records_in_the_write_ahead_log_come_back_with_the_rest(roost_home: Path) -> None:
    path = seed(roost_home, 300)
    hit = job_page(path, "j0150")
    on_hit = {f"j{i:04d}" for i in range(300) if job_page(path, f"j{i:04d}") == hit}
    subprocess.run([sys.executable, "-c", WRITER, str(path)], check=True)
    assert path.with_name("roost.db-wal").stat().st_size > 40 * 100 and b"wal 39" not in path.read_bytes()
    garbage(path, hit)
    daemon = started(roost_home)
    try:
        back = {r["id"] for r in daemon.rows()}
        assert back == {f"j{i:04d}" for i in range(300)} - on_hit | {f"w{i:03d}" for i in range(40)}
        assert "salvaged" in daemon.call("status")["store_notice"]
    finally:
        daemon.stop()


def test_the_page_reader_takes_committed_frames_from_the_write_ahead_log(tmp_path: Path) -> None:
    """With nothing left of the main file but its first page, every record is read from the log."""
    path = tmp_path / "roost.db"
    os.close(paths_mod.open_private(path))
    subprocess.run([sys.executable, "-c", WRITER, str(path)], check=True)
    assert b"wal 39" not in path.read_bytes()
    with open(path, "r+b") as fh:
        fh.truncate(PAGE)
    with open(path.with_name("roost.db-wal"), "ab") as fh:
        fh.write(b"\xff" * (24 + PAGE))  # a torn frame after the last commit: not taken
    pages = PageFile(path)
    try:
        titles = sorted(json.loads(c.values[2])["title"] for c in LeafScan(pages)
                        if len(c.values) == 3 and isinstance(c.values[2], str) and c.values[2].startswith("{"))
    finally:
        pages.close()
    assert titles == sorted(f"wal {i}" for i in range(40))


def test_after_a_repair_under_umask_000_every_file_is_owner_only_and_no_copy_is_left(roost_home: Path) -> None:
    path = seed(roost_home, 50)
    garbage(path, 3, pages=2)
    daemon = DaemonHarness(roost_home)
    daemon.write_config("")
    old = os.umask(0)
    try:
        daemon.start()  # the daemon inherits the umask
        try:
            daemon.wait_state(daemon.spawn("say after"), "idle")
        finally:
            daemon.stop()
    finally:
        os.umask(old)
    [aside] = asides(path, "damaged")
    names = {f.name for f in path.parent.iterdir() if f.name.startswith("roost.db")}
    allowed = {"roost.db", "roost.db-wal", "roost.db-shm", "roost.db-journal", "roost.db.clean"} | {
        aside.name + suffix for suffix in ("", "-wal", "-shm", "-journal")}
    assert names <= allowed, f"left behind: {sorted(names - allowed)}"
    for name in names:
        assert stat.S_IMODE(os.stat(path.parent / name).st_mode) == 0o600, name
