"""`list` with ``lines`` (what `roost ls --json` reads): each job's full row as its line, encoded
once by the daemon, ASCII-only and the same value as ``record_json`` of the row; a page of lines
full of what JSON must escape still fits a frame; a record from before a field was added and a
job changed in memory and not yet saved are listed as they are (roost/daemon/storage/listing.py)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Iterator

import pytest

from roost.bounds import LAST_TEXT_MAX
from roost.daemon.storage import recovery
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.listing import ls_line
from roost.daemon.storage.store import Store
from roost.models import Job, State, record_json
from roost.protocol import MAX_FRAME, encode


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "roost.db")
    yield s
    s.close()


def started(store: Store) -> JobIndex:
    index = JobIndex()
    try:
        recovery.recover(store, index, lambda: 1000.0, store.path.parent)
    finally:
        gc.unfreeze()
    return index


def every_page(index: JobIndex, **args: object) -> tuple[list[str], list[dict]]:
    lines, pages, cursor = [], [], None
    while True:
        page = index.page(limit=1000, lines=True, cursor=cursor, **args)
        assert "rows" not in page
        pages.append(page)
        lines += page["lines"]
        if (cursor := page["next"]) is None:
            return lines, pages


def test_a_line_is_ascii_json_of_the_rows_record_json_with_every_odd_character_escaped() -> None:
    job = Job(id="j1", title="café \u2603 \x7f \x9b[31m \"quoted\" back\\slash \U0001F600", driver="builtin", cwd="/w",
              state=State.FAILED, created_at=1.5, state_since=2.25, updated_at=3.0, reason="tab\there\nnewline",
              labels={"ü": "ß"}, usage={"cost": 0.1, "turns": 3})
    row = job.to_dict()
    line = ls_line(row)
    assert line.isascii() and "\x7f" not in line and "\n" not in line and "\x1b" not in line
    assert json.loads(line) == json.loads(json.dumps(record_json(job.to_dict())))
    plain = ls_line(Job(id="j2", title="plain", driver="builtin", cwd="/w").to_dict())
    assert plain.startswith('{"id":"j2","title":"plain"'), "compact, in the record's field order"


def test_lines_list_every_job_once_as_its_full_row_would_and_the_counts_of_the_tree(store: Store) -> None:
    with store.transaction():
        for n in range(30):
            store.save_job(Job(id=f"r{n:02d}", title=f"root {n}", driver="builtin", cwd="/w", state=State.DONE,
                               created_at=float(2 * n), last_text="z" * 100))
            store.save_job(Job(id=f"r{n:02d}k", title="kid", driver="builtin", cwd="/w", state=State.IDLE,
                               created_at=float(2 * n + 1), parent=f"r{n:02d}", depth=1))
    index = started(store)
    lines, _ = every_page(index)
    listed = [json.loads(line) for line in lines]
    assert [r["id"] for r in listed] == [f"r{n // 2:02d}" + ("k" if n % 2 else "") for n in range(60)]
    for got in listed:
        assert got == json.loads(json.dumps(record_json(index.row(got["id"], full=True))))
    assert listed[0]["descendants"] == 1 and listed[1]["parent"] == "r00"
    assert listed[0]["created_at"] == "1970-01-01T00:00:00Z" and listed[1]["created_at"] == "1970-01-01T00:00:01Z"


def test_a_page_of_lines_full_of_escapes_fits_a_frame(store: Store) -> None:
    """A quote or a backslash is one character in a line and two in the frame: the page counts them."""
    with store.transaction():
        for n in range(400):
            store.save_job(Job(id=f"q{n:03d}", title="\"" * 100, driver="builtin", cwd="/w", state=State.DONE,
                               created_at=float(n), last_text="\\" * LAST_TEXT_MAX))
    lines, pages = every_page(started(store))
    assert len(lines) == 400 and len(pages) > 1
    for page in pages:
        assert len(encode({"id": 1, "ok": True, "result": page})) <= MAX_FRAME


def test_an_old_record_and_a_job_changed_in_memory_are_listed_as_they_are(store: Store) -> None:
    with store.transaction():
        store.save_job(Job(id="new", title="new", driver="builtin", cwd="/w", created_at=2.0))
    old = Job(id="old", title="old", driver="builtin", cwd="/w", created_at=1.0).to_dict()
    del old["stall"], old["unseen"]  # written by a roost from before those fields
    with store.transaction():
        store._db.execute("INSERT INTO jobs (id, parent, record) VALUES (?, ?, ?)", ("old", None, json.dumps(old)))
    index = started(store)
    index.jobs["new"].title = "renamed, not saved yet"
    listed = {r["id"]: r for r in map(json.loads, every_page(index)[0])}
    assert listed["old"]["stall"] == "" and listed["old"]["unseen"] is False
    assert listed["new"]["title"] == "renamed, not saved yet"
