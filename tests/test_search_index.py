"""The search index in process, through the store's own API: its bounds at and past them (matches
out of the caller's reach, a backfill step, an entry's indexed text, a snippet) and the marks."""

from __future__ import annotations

import json
from pathlib import Path

from roost.daemon.storage import search
from roost.daemon.storage.store import Store
from roost.protocol import PAGE_BYTES, SEARCH_LIMIT_MAX


def every(store: Store, text: str) -> list[int]:
    """Every seq matching ``text``, paged."""
    seqs: list[int] = []
    before = None
    while True:
        page = store.search(text, lambda job: True, SEARCH_LIMIT_MAX, before)
        seqs += [r["seq"] for r in page["results"]]
        before = page["next"]
        if before is None:
            return seqs


def test_a_page_stops_after_scan_max_matches_out_of_reach_and_goes_on_from_next(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    with store.transaction():
        mine = store.add_timeline("mine", "text", {"text": "wren"})["seq"]
        for _ in range(search.SCAN_MAX):
            store.add_timeline("other", "text", {"text": "wren"})
    page = store.search("wren", lambda job: job == "mine", 10, None)
    assert page["results"] == [] and page["scanned_out"] and page["next"] is not None
    page = store.search("wren", lambda job: job == "mine", 10, page["next"])
    assert [r["seq"] for r in page["results"]] == [mine] and not page["scanned_out"] and page["next"] is None
    fewer = Store(tmp_path / "t.db")
    with fewer.transaction():
        fewer.add_timeline("mine", "text", {"text": "wren"})
        for _ in range(search.SCAN_MAX - 1):
            fewer.add_timeline("other", "text", {"text": "wren"})
    page = fewer.search("wren", lambda job: job == "mine", 10, None)
    assert len(page["results"]) == 1 and not page["scanned_out"]


def test_an_old_store_is_indexed_a_bounded_batch_a_step_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = Store(path)
    with store.transaction():
        for i in range(search.BACKFILL_BATCH + 1):
            store.add_timeline("j", "text", {"text": f"finch {i}"})
    store._db.execute("DROP TABLE timeline_fts")  # as a store made before search was
    store.close()
    old = Store(path)
    top = search.backlog(old._db)
    assert top == search.BACKFILL_BATCH + 2 and old.search("finch", lambda job: True, 100, None)["results"] == []
    new = old.add_timeline("j", "text", {"text": "finch new"})["seq"]
    assert [r["seq"] for r in old.search("finch", lambda job: True, 100, None)["results"]] == [new], \
        "a new entry is searchable at once"
    assert old.index_old_entries() == search.BACKFILL_BATCH
    assert len(every(old, "finch")) == search.BACKFILL_BATCH + 1, "a step indexes a batch"
    assert search.backlog(old._db) == 2 and min(every(old, "finch")) == 2, "the newest first"
    assert old.index_old_entries() == 1 and old.index_old_entries() == 0
    assert old.search("finch", lambda job: True, 100, None)["indexing"] == 0
    assert sorted(every(old, "finch")) == list(range(1, search.BACKFILL_BATCH + 3))


def test_an_entry_is_indexed_up_to_index_chars(tmp_path: Path) -> None:
    at = "y" * (search.INDEX_CHARS - 3) + " in"  # exactly INDEX_CHARS
    past = "y" * (search.INDEX_CHARS - 2) + " on"  # its last character is one past
    assert search.entry_text("text", {"text": at}) == at
    assert search.entry_text("text", {"text": past}) == past[:-1]
    store = Store(tmp_path / "s.db")
    store.add_timeline("j", "text", {"text": at})
    store.add_timeline("j", "text", {"text": past})
    assert len(store.search("in", lambda job: True, 10, None)["results"]) == 1
    assert store.search("on", lambda job: True, 10, None)["results"] == []


def test_marks_are_spans_of_plain_text_and_a_snippet_is_cut_at_snippet_chars() -> None:
    o, c = "\ue000", "\ue001"
    assert search.marked(f"a {o}heron{c} and a {o}Heron{c}") == ("a heron and a Heron", [[2, 7], [14, 19]])
    text, spans = search.marked("x" * (search.SNIPPET_CHARS - 2) + f"{o}heron{c} more")
    assert len(text) == search.SNIPPET_CHARS and spans == [[search.SNIPPET_CHARS - 2, search.SNIPPET_CHARS]]
    text, spans = search.marked("x" * search.SNIPPET_CHARS + f"{o}heron{c}")
    assert len(text) == search.SNIPPET_CHARS and spans == []
    assert "\ue000" not in search.entry_text("text", {"text": f"{o}forged{c}"}), "no entry can forge a mark"


def test_what_each_kind_of_entry_gives_the_index() -> None:
    assert search.entry_text("tool", {"name": "shell", "args": {"cmd": "ls"}, "result": "a.txt"}) == \
        'shell {"cmd": "ls"} a.txt'
    assert search.entry_text("error", {"message": "boom"}) == "boom"
    assert search.entry_text("reports", {"reports": [{"text": "one"}, {"text": "two"}]}) == "one two"
    assert search.entry_text("state", {"state": "idle"}) == ""


def test_a_full_page_of_the_worst_escaping_text_stays_inside_a_page(tmp_path: Path) -> None:
    """SEARCH_LIMIT_MAX results whose snippets are all characters JSON writes as six (a control
    character each): the page's JSON is still within PAGE_BYTES."""
    store = Store(tmp_path / "s.db")
    worst = "\x01" * (search.INDEX_CHARS // 2)
    with store.transaction():
        for _ in range(SEARCH_LIMIT_MAX + 1):
            store.add_timeline("j", "text", {"text": f"{worst} wren {worst}"})
    page = store.search("wren", lambda job: True, SEARCH_LIMIT_MAX, None)
    assert len(page["results"]) == SEARCH_LIMIT_MAX and page["next"] is not None
    assert all(len(r["text"]) <= search.SNIPPET_CHARS for r in page["results"])
    size = len(json.dumps(page).encode())
    assert size < PAGE_BYTES, size
