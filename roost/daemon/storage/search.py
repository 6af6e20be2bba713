"""Search across every job's timeline: SQLite's full-text index (FTS5) beside the timeline table.

The daemon is the one writer: ``index_entry`` runs in the same transaction as the timeline insert
(roost/daemon/storage/store.py calls it), so an entry is searchable exactly when it is stored. A store made
before the index existed is indexed in the background, newest entries first, ``BACKFILL_BATCH``
entries per transaction (``backfill_step``); until it is done a search says how many entries are
still to index. Only the texts a person reads are indexed (what a message, the agent's text, a
report, a note or an error says; a tool's name, arguments and result), each at most
``INDEX_CHARS`` characters.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any, Callable

#: Most characters of one entry that go into the index (entries are at most ENTRY_MAX already).
INDEX_CHARS = 16 * 1024
#: Entries one background step indexes in one transaction (bench/search.py: tens of ms).
BACKFILL_BATCH = 250
#: The longest query a search takes, and the most words in it.
QUERY_MAX = 200
WORDS_MAX = 16
#: Results per page by default (the most: roost.protocol.SEARCH_LIMIT_MAX).
SEARCH_LIMIT = 50
#: Tokens of context a result's snippet shows around its match.
SNIPPET_TOKENS = 16
#: The snippet's longest text in characters (a token may be long; the reply stays bounded).
SNIPPET_CHARS = 400
#: How deep one search may look through matches outside the caller's reach before giving a page.
SCAN_MAX = 5000

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use marks around a match; stripped from indexed text
_STRIP = str.maketrans({_OPEN: " ", _CLOSE: " "})
_MARKS = re.compile(f"({_OPEN}|{_CLOSE})")

SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS timeline_fts USING fts5(text, job UNINDEXED, tokenize='unicode61');
"""


class SearchError(ValueError):
    """A query that cannot be searched for; the message says why."""


def entry_text(kind: str, data: dict[str, Any]) -> str:
    """The words of one timeline entry a person would search for ("" when it has none)."""
    if kind in ("prompt", "message", "text", "report"):
        text = data.get("text")
    elif kind in ("note", "error"):
        text = data.get("message")
    elif kind == "reports":
        reports = data.get("reports")
        text = " ".join(str(r.get("text", "")) for r in reports if isinstance(r, dict)) \
            if isinstance(reports, list) else ""
    elif kind == "tool":
        args = data.get("args")
        text = " ".join(str(part) for part in (data.get("name"), args if isinstance(args, str) else
                                               json.dumps(args) if args else "", data.get("result") or "") if part)
    else:
        return ""
    return str(text or "")[:INDEX_CHARS].translate(_STRIP)


def create(db: sqlite3.Connection) -> None:
    """Make the index in a store that has none: what is stored already is marked for the background
    backfill (``meta.search_backfill``: the seq below which entries still wait, walking down)."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='timeline_fts'").fetchone():
        return
    db.execute(SCHEMA)
    top = db.execute("SELECT COALESCE(MAX(seq), 0) FROM timeline").fetchone()[0]
    db.execute("INSERT OR REPLACE INTO meta VALUES ('search_backfill', ?)", (str(top + 1),))


def index_again(db: sqlite3.Connection) -> None:
    """Forget the index and mark every stored entry for the background backfill (a store salvaged
    row by row: its timeline rows came in without the index's upkeep)."""
    db.execute("DELETE FROM timeline_fts")
    top = db.execute("SELECT COALESCE(MAX(seq), 0) FROM timeline").fetchone()[0]
    db.execute("INSERT OR REPLACE INTO meta VALUES ('search_backfill', ?)", (str(top + 1),))


def index_entry(db: sqlite3.Connection, seq: int, job: str, kind: str, data: dict[str, Any]) -> None:
    """Index one new timeline entry (in the transaction that stores it)."""
    text = entry_text(kind, data)
    if text:
        db.execute("INSERT INTO timeline_fts (rowid, text, job) VALUES (?, ?, ?)", (seq, text, job))


def backlog(db: sqlite3.Connection) -> int:
    """The seq below which old entries still wait to be indexed (0: none wait)."""
    row = db.execute("SELECT value FROM meta WHERE key='search_backfill'").fetchone()
    return int(row[0]) if row else 0


def backfill_step(db: sqlite3.Connection, batch: int = BACKFILL_BATCH) -> int:
    """Index up to ``batch`` of the newest entries still waiting (the caller holds a transaction);
    how many entries were read. 0 means the backfill is done."""
    below = backlog(db)
    if below <= 0:
        return 0
    rows = db.execute("SELECT seq, job, kind, data FROM timeline WHERE seq<? ORDER BY seq DESC LIMIT ?",
                      (below, batch)).fetchall()
    for seq, job, kind, data in rows:
        try:
            loaded = json.loads(data)
        except ValueError:
            continue  # a damaged entry has nothing to search
        if isinstance(loaded, dict):
            index_entry(db, seq, job, kind, loaded)
    low = rows[-1][0] if len(rows) == batch else 0
    if low:
        db.execute("UPDATE meta SET value=? WHERE key='search_backfill'", (str(low),))
    else:
        db.execute("DELETE FROM meta WHERE key='search_backfill'")
    return len(rows)


def fts_query(text: str) -> str:
    """A person's words as an FTS5 query: every word must appear (each quoted, so no word is read as
    FTS5 syntax); a trailing ``*`` on a word matches it as a prefix."""
    if len(text) > QUERY_MAX:
        raise SearchError(f"search: a query is at most {QUERY_MAX} characters, got {len(text)}")
    words = text.translate(_STRIP).split()
    if not words:
        raise SearchError("search: give some words to search for")
    if len(words) > WORDS_MAX:
        raise SearchError(f"search: a query is at most {WORDS_MAX} words, got {len(words)}")
    parts = []
    for word in words:
        prefix = word.endswith("*") and len(word) > 1
        word = word.rstrip("*") if prefix else word
        parts.append('"' + word.replace('"', '""') + '"' + ("*" if prefix else ""))
    return " ".join(parts)


def marked(snippet: str) -> tuple[str, list[list[int]]]:
    """A snippet with FTS5's marks turned into plain text and [start, end) spans of the matches,
    cut at SNIPPET_CHARS (so no client parses marks out of text)."""
    out: list[str] = []
    spans: list[list[int]] = []
    size = 0
    start: int | None = None
    for part in _MARKS.split(snippet):
        if part == _OPEN:
            start = size
        elif part == _CLOSE:
            if start is not None and size > start:
                spans.append([start, size])
            start = None
        else:
            out.append(part[:SNIPPET_CHARS - size])
            size += len(out[-1])
    if start is not None and size > start:
        spans.append([start, size])
    return "".join(out), spans


def search(db: sqlite3.Connection, text: str, visible: Callable[[str], bool],
           limit: int = SEARCH_LIMIT, before: int | None = None) -> dict[str, Any]:
    """One page of matches, newest first, of the entries of jobs ``visible`` says the caller sees.
    ``next`` is the ``before`` of the next page (None: no more); ``scanned_out`` says a page stopped
    early after SCAN_MAX matches outside the caller's reach (ask again from ``next``). ``visible``
    runs inside the query, so a snippet is made only for a match the caller sees."""
    query = fts_query(text)
    db.create_function("roost_visible", 1, lambda job: bool(visible(job)))
    results: list[dict[str, Any]] = []
    skipped = 0
    more: int | None = None
    scanned_out = False
    try:
        cur = db.execute(
            f"SELECT f.rowid, f.job, CASE WHEN roost_visible(f.job) THEN snippet(timeline_fts, 0, '{_OPEN}', "
            f"'{_CLOSE}', '…', {SNIPPET_TOKENS}) END FROM timeline_fts f WHERE timeline_fts MATCH ? AND f.rowid < ? "
            "ORDER BY f.rowid DESC", (query, before if before is not None else 2 ** 62))
        for seq, job, snip in cur:
            if snip is None:
                skipped += 1
                if skipped >= SCAN_MAX:
                    more, scanned_out = seq, True
                    break
                continue
            if len(results) >= limit:
                more = results[-1]["seq"]
                break
            snippet, spans = marked(snip)
            results.append({"seq": seq, "job": job, "text": snippet, "marks": spans})
        cur.close()
    except sqlite3.OperationalError as exc:  # fts_query quotes every word, so this is rare: say it plainly
        raise SearchError(f"search: SQLite could not search for {text!r}: {exc}") from None
    for result in results:  # the entry's time and kind, by its primary key
        result["ts"], result["kind"] = db.execute("SELECT ts, kind FROM timeline WHERE seq=?",
                                                  (result["seq"],)).fetchone()
    return {"results": results, "next": more, "scanned_out": scanned_out, "indexing": backlog(db)}
