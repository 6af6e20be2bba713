"""A start loads a brief of each job, not its record (roost/daemon/storage/briefs.py): the briefs
say what the records say whoever wrote them, a start reads whole only the jobs it must settle,
a listing of every job keeps no record it read, and a job once read is the one ``Job`` the
daemon changes. Speed is bench/run.py scale's; here the counts that make it."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Iterator

import pytest

from roost.daemon.storage import recovery
from roost.daemon.storage.briefs import READ, Brief
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.store import _IDS_A_QUERY, Store
from roost.models import Job, State

FIELDS = ("id", "parent", "state", "created_at", "archived_at", "depth", "pid", "title", "cwd", "worktree")


def tree(roots: int, kids: int) -> Iterator[Job]:
    """Finished roots with ``kids`` children each, oldest first; every 7th root archived."""
    n = 0
    for r in range(roots):
        root = f"r{r:05d}"
        yield Job(id=root, title=f"root {r}", driver="builtin", cwd="/w", state=State.DONE, created_at=float(n),
                  archived_at=float(n) if r % 7 == 3 else None, last_text="x" * 300)
        n += 1
        for k in range(kids):
            yield Job(id=f"{root}k{k:02d}", title=f"kid {k}", driver="builtin", cwd="/w", state=State.IDLE,
                      created_at=float(n), parent=root, depth=1, last_text="y" * 300)
            n += 1


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "roost.db")
    yield s
    s.close()


def started(store: Store, reads: list[str] | None = None) -> JobIndex:
    """The index a start makes; ``reads`` collects every id whose record is read whole after."""
    index = JobIndex()
    try:
        recovery.recover(store, index, lambda: 1000.0, store.path.parent)
    finally:
        gc.unfreeze()
    if reads is not None:
        real, real_data = store.records, store.record_data
        index.reads_from(lambda ids: (reads.extend(ids), real(ids))[1],
                         lambda ids: (reads.extend(ids), real_data(ids))[1])
    return index


def brief_of(store: Store, job_id: str) -> dict[str, object] | None:
    row = store._db.execute(READ + " WHERE id=?", (job_id,)).fetchone()
    return None if row is None else {f: getattr(Brief(tuple(row)), f) for f in (*FIELDS, "approvals")}


def facts_of(job: Job) -> dict[str, object]:
    return {**{f: getattr(job, f) for f in FIELDS}, "approvals": len(job.approvals)}


def test_a_brief_says_what_its_record_says_whoever_wrote_it(store: Store) -> None:
    job = Job(id="j1", title="t", driver="builtin", cwd="/wt/j1", worktree="/wt/j1", state=State.WAITING,
              created_at=5.0, pid=42, depth=2,
              parent="j0", archived_at=9.0, approvals=[{"id": "a1", "tool": "shell", "what": {}, "asked_at": 1.0}])
    with store.transaction():
        store.save_job(job)
    assert brief_of(store, "j1") == facts_of(job)
    job.state, job.pid, job.approvals = State.IDLE, None, []
    with store.transaction():
        store.save_job(job)
    assert brief_of(store, "j1") == facts_of(job), "a save writes it again"
    by_hand = {**job.to_dict(), "title": "edited by hand", "state": "failed"}
    with store.transaction():  # an older roost, a salvage, a person with sqlite3: not through save_job
        store._db.execute("UPDATE jobs SET record=? WHERE id='j1'", (json.dumps(by_hand),))
    assert brief_of(store, "j1") == {**facts_of(job), "title": "edited by hand", "state": State.FAILED}
    for unsound in ("{not json", "[]", json.dumps({**by_hand, "id": "other"}), json.dumps({**by_hand, "state": "nope"}),
                    json.dumps({k: v for k, v in by_hand.items() if k != "cwd"}), json.dumps({**by_hand, "cwd": 5}),
                    json.dumps({**by_hand, "worktree": ["/x"]})):
        with store.transaction():
            store._db.execute("UPDATE jobs SET record=? WHERE id='j1'", (unsound,))
        assert brief_of(store, "j1") is None, f"no brief for a record that would not load: {unsound[:40]}"
    with store.transaction():
        store._db.execute("DELETE FROM jobs WHERE id='j1'")
    assert store._db.execute("SELECT COUNT(*) FROM job_briefs").fetchone()[0] == 0


def test_the_daemons_save_writes_the_brief_itself_and_only_when_it_changed(store: Store) -> None:
    """The output path saves a 16 KiB record per 64 KiB of output: the trigger must not read it
    again. Its brief row is rewritten in place (the trigger's would be a new row) and not at all
    when no brief field changed; a save that fails leaves no mark that would hide the next writer."""
    job = Job(id="j1", title="t", driver="builtin", cwd="/", state=State.WORKING, created_at=5.0, last_text="x" * 16384)

    def brief_row() -> tuple[int, int]:
        rowid = store._db.execute("SELECT rowid FROM job_briefs WHERE id='j1'").fetchone()[0]
        return rowid, store._db.total_changes

    with store.transaction():
        store.save_job(job)
    rowid, changes = brief_row()
    job.last_text = "y" * 16384
    with store.transaction():
        store.save_job(job)
    assert brief_row() == (rowid, changes + 3), "the mark set and taken, the record: no brief written"
    job.state = State.IDLE
    with store.transaction():
        store.save_job(job)
    assert brief_row() == (rowid, changes + 7) and brief_of(store, "j1") == facts_of(job)
    assert store._db.execute("SELECT COUNT(*) FROM brief_marks").fetchone()[0] == 0
    job.labels = {"bad": object()}  # type: ignore[dict-item]
    with store.transaction():
        with pytest.raises(TypeError):
            store.save_job(job)
        store._db.execute("UPDATE jobs SET record=? WHERE id='j1'", (json.dumps({**job.to_dict(), "labels": {},
                                                                                  "title": "by hand"}),))
    assert brief_of(store, "j1") == {**facts_of(job), "title": "by hand"}, "the failed save left no mark"


def test_which_jobs_own_or_work_in_a_worktree_is_known_without_reading_records(store: Store) -> None:
    """An archive asks which jobs own a worktree and which work in one (roost/daemon/git/worktrees.py):
    the briefs say it, so 100k records are not read for it; briefs from before they held it are
    made again."""
    with store.transaction():
        for job in tree(30, 3):
            store.save_job(job)
        for n in range(3):
            store.save_job(Job(id=f"w{n}", title="t", driver="builtin", cwd=f"/wt/w{n}", worktree=f"/wt/w{n}",
                               state=State.IDLE, created_at=900.0 - n))
        store.save_job(Job(id="w0k", title="t", driver="builtin", cwd="/wt/w0/sub", state=State.IDLE, created_at=901.0,
                           parent="w0", depth=1))
        store.save_job(Job(id="near", title="t", driver="builtin", cwd="/wt/w0x", state=State.IDLE, created_at=902.0))
    reads: list[str] = []
    index = started(store, reads)
    assert [f.id for f in index.jobs.with_worktree()] == ["w2", "w1", "w0"], "oldest first"
    assert sorted(f.id for f in index.jobs.working_in("/wt/w0")) == ["w0", "w0k"], "a sibling path is not inside"
    assert reads == [] and index.jobs.loaded() == 0
    old = "CREATE TABLE job_briefs (id TEXT PRIMARY KEY, parent TEXT, state TEXT NOT NULL, created_at REAL NOT NULL, " \
          "archived_at REAL, depth INTEGER NOT NULL, pid INTEGER, title TEXT, approvals INTEGER NOT NULL)"
    with store.transaction():  # the briefs of the roost before this one
        store._db.execute("DROP TABLE job_briefs")
        store._db.execute(old)
    store.close()
    again = Store(store.path)
    try:
        assert {b.id: b.worktree for b in again.briefs()[0] if b.worktree} == {f"w{n}": f"/wt/w{n}" for n in range(3)}
    finally:
        again.close()


def test_a_store_from_before_briefs_gets_them_at_its_first_start(store: Store) -> None:
    with store.transaction():
        for job in tree(3, 2):
            store.save_job(job)
        store._db.execute("DELETE FROM job_briefs")
    briefs, whole = store.briefs()
    assert whole == [] and len(briefs) == 9
    assert {b.id: {f: getattr(b, f) for f in (*FIELDS, "approvals")} for b in briefs} == \
        {j.id: facts_of(j) for j in store.jobs()}


def test_a_start_reads_whole_only_the_jobs_it_settles(store: Store) -> None:
    with store.transaction():
        for job in tree(20, 4):
            store.save_job(job)
        store.save_job(Job(id="zlost", title="t", driver="builtin", cwd="/", state=State.WORKING, created_at=500.0,
                           pid=99999999, parent="r00000", depth=1))
        store.save_job(Job(id="zasks", title="t", driver="builtin", cwd="/", state=State.IDLE, created_at=501.0,
                           approvals=[{"id": "a1", "tool": "shell", "what": {}, "asked_at": 1.0}]))
    index = started(store)
    assert index.jobs.loaded() == 2 and len(index.jobs) == 102
    assert index.jobs["zlost"].state == State.FAILED and index.jobs["zasks"].approvals == []
    assert index.counts("r00000") == (5, 0), "counted from the briefs: four kids and the lost one"
    assert index.counts("r00003") == (4, 0), "an archived root counts its own subtree"


def test_listing_every_job_whole_keeps_none_of_their_records(store: Store) -> None:
    with store.transaction():
        for job in tree(100, 10):
            store.save_job(job)
    reads: list[str] = []
    index = started(store, reads)
    rows, cursor, pages = [], None, 0
    while True:
        page = index.page(limit=1000, full=True, archived=True, cursor=cursor)
        rows += page["rows"]
        pages += 1
        if (cursor := page["next"]) is None:
            break
    assert [r["id"] for r in rows] == [j.id for j in tree(100, 10)], "every job once, in creation order"
    assert rows[0]["last_text"] == "x" * 300 and rows[0]["descendants"] == 10
    assert index.jobs.loaded() == 0, "the pages' records were read for the pages only"
    assert len(reads) <= len(rows) + pages * 256, "each record read about once (a batch may overshoot a page)"
    view, left = index.agent_view(50)
    assert (len(view), left) == (50, 36) and index.jobs.loaded() == 0, "86 roots not archived: 50 shown"


def test_a_job_read_once_is_the_one_the_daemon_changes(store: Store) -> None:
    with store.transaction():
        for job in tree(2, 3):
            store.save_job(job)
    index = started(store)
    kid = index.jobs["r00000k01"]
    assert index.get("r00000k01") is kid and index.kids("r00000")[1] is kid
    kid.state = State.WORKING  # as the engine does: in place, then tells the index
    index.update(kid)
    assert index.counts("r00000") == (3, 1)
    assert index.page(under="r00000")["rows"][1]["state"] == "working", "a listing shows the job as it is"


def test_more_records_than_one_query_takes_are_read_in_batches(store: Store) -> None:
    with store.transaction():
        for job in tree(1, _IDS_A_QUERY * 2 + 1):
            store.save_job(job)
    ids = [j.id for j in tree(1, _IDS_A_QUERY * 2 + 1)]
    assert set(store.records(ids)) == set(ids)
    assert len(store.records(ids[:_IDS_A_QUERY])) == _IDS_A_QUERY
    index = started(store)
    assert [k.id for k in index.descendants("r00000")] == ids[1:]
    assert index.jobs.loaded() == len(ids) - 1
