"""The store: one SQLite file (WAL) with job records, timelines, the report outbox and the inbox.

Only the daemon opens it. Every change is committed before the daemon acknowledges it to anyone
or pushes it to subscribers, so a crash of the daemon loses nothing that was acknowledged.
One idea at about 490 lines: each table's reads and writes, next to the schema and the
transactions they run in; the search index is its own module (``search.py``) with a hook here, the
usage tables too (``usage.py``, ``Store.usage``), and repair is ``repair.py`` / ``pages.py``. The
reports' and messages' queries (outbox, inbox) could follow ``usage.py`` into a table class of
their own, the next split if it grows.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from roost.daemon.storage import briefs, search, usage
from roost.daemon.storage.output_bytes import OutputBytes
from roost.daemon.storage.briefs import Brief
from roost.daemon.storage.records import parse_record, record_data
from roost.models import Job
from roost.paths import open_private
from roost.protocol import PAGE_BYTES

SCHEMA_VERSION = 1
#: The most a store's notice holds (it comes with every person's hello).
NOTICE_CHARS = 4000
#: Records read by one query when the daemon needs them whole (SQLite's bound on ``?`` is higher).
_IDS_A_QUERY = 900

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    parent TEXT,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_parent ON jobs(parent);
CREATE TABLE IF NOT EXISTS timeline (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS timeline_job ON timeline(job, seq);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    parent TEXT NOT NULL,
    child TEXT NOT NULL,
    state TEXT NOT NULL,
    text TEXT NOT NULL,
    question INTEGER NOT NULL,
    created_at REAL NOT NULL,
    delivered_at REAL
);
CREATE INDEX IF NOT EXISTS outbox_parent ON outbox(parent, delivered_at);
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at REAL NOT NULL,
    delivered_at REAL
);
CREATE INDEX IF NOT EXISTS inbox_job ON inbox(job, delivered_at);
CREATE TABLE IF NOT EXISTS damaged_records (id TEXT NOT NULL, record TEXT NOT NULL, error TEXT NOT NULL, ts REAL NOT NULL);
"""


class Entry(dict):  # type: ignore[type-arg]
    """A timeline entry just written, with its ``data`` as the store encoded it: what a push to
    subscribers sends (``publisher.timeline``), so a command's 64 KiB piece of output is encoded
    once on its way from the worker to the store and every subscriber. Its ``data`` is not to be
    changed after the write (the encoding would no longer say it)."""

    __slots__ = ("data_json",)
    data_json: str


class StoreError(Exception):
    """The store cannot be opened or is of a schema this roost does not know."""


def describe_failure(exc: BaseException, path: Path) -> str:
    """What a failed write means, in words a person can act on."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "full" in text:
        return f"the state directory is full ({path.parent}): the change was not saved"
    if isinstance(exc, OSError) and exc.errno == 28:
        return f"the state directory is full ({path.parent}): the change was not saved"
    return f"the store ({path}) could not be written: {text}"


class StoreDamaged(StoreError):
    """The file is not a readable SQLite store (garbage, truncated, malformed pages)."""


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._depth = 0
        self._after_commit: list[Callable[[], None]] = []
        self._opts: dict[str, Any] = {}  # one copy of each distinct driver_opts read (``parse_record``)
        if not path.exists():  # owner-only from the first byte; SQLite gives -wal and -shm its mode
            os.close(open_private(path))
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._migrate()
            #: Each model call's spend and the budgets (roost/daemon/storage/usage.py).
            self.usage = usage.UsageTable(self._db)
            #: Each job's bytes of output on its timeline (roost/daemon/storage/output_bytes.py).
            self.output = OutputBytes(self._db)
        except sqlite3.DatabaseError as exc:
            raise StoreDamaged(f"{path}: cannot open the store: {exc}") from None

    def check(self) -> str | None:
        """What SQLite's quick check finds wrong with the file, or None when it is sound."""
        try:
            rows = [r[0] for r in self._db.execute("PRAGMA quick_check(5)")]
        except sqlite3.DatabaseError as exc:
            return str(exc)
        return None if rows == ["ok"] else "; ".join(rows)

    # -- what a person must hear about (a repaired store), until they acknowledge it -----------------
    def notice(self) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key='notice'").fetchone()
        return row["value"] if row else None

    def set_notice(self, text: str) -> None:
        """Add a line to the notice; past NOTICE_CHARS the oldest lines give way (it rides in
        every person's hello reply, so it stays small)."""
        with self.transaction():
            old = self.notice()
            lines = [*(old.splitlines() if old else []), " ".join(text.split())[:NOTICE_CHARS]]
            while len(lines) > 1 and sum(len(line) + 1 for line in lines) > NOTICE_CHARS:
                lines.pop(0)
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('notice', ?)", ("\n".join(lines),))

    def acknowledge(self) -> None:
        with self.transaction():
            self._db.execute("DELETE FROM meta WHERE key='notice'")

    def table_columns(self, table: str) -> list[tuple[str, str, bool, bool]]:
        """Each column of ``table`` as (name, declared type, not null, is the rowid): the shape
        a salvaged row must have to be taken for one of this table's."""
        cols = list(self._db.execute(f"PRAGMA table_info({table})"))
        alias = [c["name"] for c in cols if c["pk"]] if sum(1 for c in cols if c["pk"]) == 1 else []
        return [(c["name"], c["type"].upper(), bool(c["notnull"] or c["pk"]),
                 c["name"] in alias and c["type"].upper() == "INTEGER") for c in cols]

    def insert_row(self, table: str, columns: list[str], row: tuple[object, ...]) -> int:
        """Copy one row as it is (a salvage from a damaged store); 1 if it was new, 0 if a row
        with its key was there already."""
        with self.transaction():
            cur = self._db.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
                                   f"VALUES ({', '.join('?' * len(columns))})", row)
            return cur.rowcount

    def _migrate(self) -> None:
        with self.transaction():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self._db.execute(stmt)
            briefs.upgrade(self._db)
            for stmt in briefs.SCHEMA:
                self._db.execute(stmt)
            search.create(self._db)
            usage.create(self._db)
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif int(row["value"]) > SCHEMA_VERSION:
                raise StoreError(f"{self.path}: store schema {row['value']} is newer than this roost "
                                 f"knows ({SCHEMA_VERSION}); upgrade roost")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes into one commit; nested uses join the outer one."""
        if self._depth == 0:
            self._db.execute("BEGIN IMMEDIATE")
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self._rollback()
            raise
        self._depth -= 1
        if self._depth == 0:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error:  # a full disk fails the commit itself: nothing of it is kept
                self._rollback()
                raise
            callbacks, self._after_commit = self._after_commit, []
            for callback in callbacks:
                callback()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside a transaction: undo only what this block wrote if it fails (and drop the pushes
        it asked for), keeping the rest of the transaction."""
        self._db.execute("SAVEPOINT one")
        mark = len(self._after_commit)
        try:
            yield
        except BaseException:
            del self._after_commit[mark:]
            self.output.forget()
            try:
                self._db.execute("ROLLBACK TO one")
                self._db.execute("RELEASE one")
            except sqlite3.Error:
                pass  # the whole transaction is gone; its commit will say so
            raise
        self._db.execute("RELEASE one")

    def commit_point(self) -> None:
        """Inside a savepoint of a transaction: commit everything written so far (and send its
        pushes), then go on in a new transaction with the savepoint open again. On failure nothing
        since the transaction began is kept; the error is raised."""
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error:
            self._after_commit.clear()
            self.output.forget()
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("SAVEPOINT one")
            raise
        callbacks, self._after_commit = self._after_commit, []
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute("SAVEPOINT one")
        for callback in callbacks:
            callback()

    def _rollback(self) -> None:
        self._after_commit.clear()
        self.output.forget()
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite already rolled it back

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the current transaction commits (at once outside one): pushes to
        subscribers go out only for what is durably stored."""
        if self._depth == 0:
            callback()
        else:
            self._after_commit.append(callback)

    def close(self) -> None:
        self._db.close()

    # -- jobs ---------------------------------------------------------------------------------
    def save_job(self, job: Job) -> None:
        """Write the record, and its brief from ``job`` (marked, so the trigger reads no JSON)."""
        db = self._db
        db.execute(briefs.MARK, (job.id,))
        try:
            db.execute("INSERT INTO jobs (id, parent, record) VALUES (?, ?, ?) "
                       "ON CONFLICT(id) DO UPDATE SET parent=excluded.parent, record=excluded.record",
                       (job.id, job.parent, json.dumps(job.to_dict())))
        except BaseException:  # a mark left behind would let the next writer's record go unread
            db.execute(briefs.UNMARK, (job.id,))
            raise
        db.execute(briefs.SAVE, briefs.of_job(job))

    def jobs(self) -> list[Job]:
        """Every record, whole (what a test or a tool reads; a start reads ``briefs``)."""
        return self._whole("SELECT id, record FROM jobs")

    def briefs(self) -> tuple[list[Brief], list[Job]]:
        """What a start loads: the brief of every record SQLite vouches for (roost/daemon/storage/briefs.py),
        and the others whole, each read as ``jobs`` reads it. A store from before briefs gets
        them here, once."""
        with self.transaction():
            self._db.execute(briefs.FILL)
        cur = self._db.cursor()
        cur.row_factory = None
        ids: dict[str, str] = {}  # one string per id: a child's parent is its parent's id object
        out = []
        for row in cur.execute(briefs.READ):  # rowid order: a parent comes before its children
            brief = Brief(row)
            ids[brief.id] = brief.id
            if brief.parent is not None:
                brief.parent = ids.get(brief.parent, brief.parent)
            out.append(brief)
        return out, self._whole(briefs.UNBRIEFED)

    def records(self, ids: list[str]) -> dict[str, Job]:
        """The whole records of ``ids`` (those in the store), read when the daemon needs more of a
        job than its brief. Raises StoreDamaged for one that cannot be read, which a record with a
        brief never is (the brief's trigger checked it when it was written)."""
        return {job_id: self._parsed(job_id, record, parse_record) for job_id, record in self._texts(ids)}

    def record_data(self, ids: list[str]) -> dict[str, tuple[dict[str, Any], int]]:
        """The records of ``ids`` as data for rows (``records.record_data``), each with its stored
        length (what a listing's page counts it as). Raises StoreDamaged as ``records``."""
        return {job_id: (self._parsed(job_id, record, record_data), len(record))
                for job_id, record in self._texts(ids)}

    def stored_usage(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each stored record's ``usage`` that has figures, read by SQLite from the record's JSON
        (the spend ledger's start: no record is loaded for it). A record whose JSON is not valid,
        or whose usage is not an object of figures, gives none."""
        cur = self._db.cursor()
        cur.row_factory = None
        for job_id, text in cur.execute(
                "SELECT id, json_extract(record, '$.usage') FROM jobs WHERE json_valid(record) "
                "AND json_type(record, '$.usage') = 'object' AND json_extract(record, '$.usage') <> '{}'"):
            yield job_id, json.loads(text)

    def _texts(self, ids: list[str]) -> Iterator[tuple[str, str]]:
        cur = self._db.cursor()
        cur.row_factory = None
        for at in range(0, len(ids), _IDS_A_QUERY):
            chunk = ids[at:at + _IDS_A_QUERY]
            yield from cur.execute(f"SELECT id, record FROM jobs WHERE id IN ({', '.join('?' * len(chunk))})", chunk)

    def _parsed(self, job_id: str, record: str, parse: Callable[[str, str, dict[str, Any]], Any]) -> Any:
        try:
            return parse(job_id, record, self._opts)
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreDamaged(f"{self.path}: the record of job {job_id} cannot be read "
                               f"({type(exc).__name__}: {exc})") from None

    def _whole(self, query: str) -> list[Job]:
        """The records ``query`` selects (id, record), whole. One that cannot be read is set aside in
        ``damaged_records`` (the text is kept as it was) with a timeline note on its id."""
        out: list[Job] = []
        bad: list[tuple[str, str, str]] = []
        cur = self._db.cursor()
        cur.row_factory = None
        for job_id, record in cur.execute(query):
            try:
                out.append(parse_record(job_id, record, self._opts))
            except (ValueError, TypeError, KeyError) as exc:
                bad.append((job_id, record, f"{type(exc).__name__}: {exc}"))
        if bad:
            with self.transaction():
                for job_id, record, error in bad:
                    self._db.execute("INSERT INTO damaged_records (id, record, error, ts) VALUES (?, ?, ?, ?)",
                                     (job_id, record, error, time.time()))
                    self._db.execute("DELETE FROM jobs WHERE id=?", (job_id,))
                    self.add_timeline(job_id, "error", {"message": f"the record could not be read ({error}); "
                                                                   "it was set aside in damaged_records"})
            self.set_notice(f"{len(bad)} job record(s) could not be read and were set aside in the table "
                            f"damaged_records of {self.path}: {', '.join(b[0] for b in bad[:10])}")
        return out

    # -- timeline -----------------------------------------------------------------------------
    def add_timeline(self, job_id: str, kind: str, data: dict[str, Any], ts: float | None = None) -> "Entry":
        ts = time.time() if ts is None else ts
        text = json.dumps(data)
        cur = self._db.execute("INSERT INTO timeline (job, ts, kind, data) VALUES (?, ?, ?, ?)", (job_id, ts, kind, text))
        search.index_entry(self._db, cur.lastrowid or 0, job_id, kind, data)
        self.output.added(job_id, kind, len(text))  # ASCII: json escapes the rest
        entry = Entry(seq=cur.lastrowid, job=job_id, ts=ts, kind=kind, data=data)
        entry.data_json = text
        return entry

    def last_entry(self, job_id: str, kind: str) -> dict[str, Any] | None:
        """The job's newest timeline entry of one kind (say, its last error), read by index."""
        row = self._db.execute("SELECT data FROM timeline WHERE job=? AND kind=? ORDER BY seq DESC LIMIT 1",
                               (job_id, kind)).fetchone()
        return json.loads(row["data"]) if row else None

    def subagent_words(self, job_id: str) -> list[dict[str, Any]]:
        """The ``id``, ``state`` and ``title`` of each of the job's ``subagent`` entries, oldest
        first, read through the (job, seq) index without their texts: what the index counts them
        from, and what ends the ones still working when their worker goes."""
        cur = self._db.execute("SELECT CASE json_type(data, '$.id') WHEN 'text' THEN json_extract(data, '$.id') END, "
                               "json_extract(data, '$.state'), json_extract(data, '$.title') FROM timeline "
                               "WHERE job=? AND kind='subagent' ORDER BY seq", (job_id,))
        return [{"id": ident, "state": state, "title": title} for ident, state, title in cur]

    def timeline_page(self, job_id: str, limit: int = 200, before: int | None = None,
                      after: int | None = None, budget: int = PAGE_BYTES) -> dict[str, Any]:
        """One page of a job's timeline, oldest first, read through the (job, seq) index.

        No ``before``/``after``: the newest ``limit`` entries (tail first). ``before``: the ones
        just before that seq. ``after``: the first ones after it. A page also stops at about
        ``budget`` bytes of entries. ``more`` says whether the page left entries out on its far
        side (older ones, or with ``after`` newer ones)."""
        if after is not None:
            cur = self._db.execute("SELECT seq, job, ts, kind, data FROM timeline WHERE job=? AND seq>? "
                                   "ORDER BY seq LIMIT ?", (job_id, after, limit + 1))
        else:
            cur = self._db.execute("SELECT seq, job, ts, kind, data FROM timeline WHERE job=? AND seq<? "
                                   "ORDER BY seq DESC LIMIT ?",
                                   (job_id, before if before is not None else 2 ** 62, limit + 1))
        entries: list[dict[str, Any]] = []
        size = 0
        more = False
        for r in cur:
            if len(entries) >= limit or (entries and size + len(r["data"]) > budget):
                more = True
                break
            size += len(r["data"]) + 96
            entries.append({"seq": r["seq"], "job": r["job"], "ts": r["ts"], "kind": r["kind"],
                            "data": json.loads(r["data"])})
        if after is None:
            entries.reverse()
        return {"entries": entries, "more": more, "oldest": entries[0]["seq"] if entries else None,
                "newest": entries[-1]["seq"] if entries else None}

    def search(self, text: str, visible: Callable[[str], bool], limit: int, before: int | None) -> dict[str, Any]:
        """One page of timeline entries matching ``text`` (roost/daemon/storage/search.py)."""
        return search.search(self._db, text, visible, limit, before)

    def index_again(self) -> None:
        """Index every timeline entry again, in the background (after a salvage)."""
        with self.transaction():
            search.index_again(self._db)

    def index_old_entries(self) -> int:
        """Index one batch of the entries stored before the search index existed; 0 when none wait."""
        with self.transaction():
            return search.backfill_step(self._db)

    # -- reports to parents -------------------------------------------------------------------
    def add_report(self, parent: str, child: str, state: str, text: str, question: bool, ts: float) -> int:
        cur = self._db.execute(
            "INSERT INTO outbox (parent, child, state, text, question, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (parent, child, state, text, int(question), ts))
        return int(cur.lastrowid or 0)

    def pending_reports(self, parent: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT id, parent, child, state, text, question, created_at FROM outbox "
            "WHERE parent=? AND delivered_at IS NULL ORDER BY id", (parent,))
        return [dict(r) for r in rows]

    def parents_with_reports(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT parent FROM outbox WHERE delivered_at IS NULL")]

    def undeliver_reports(self, ids: list[int]) -> None:
        """Put reports back in the outbox: the prompt that carried them was never taken."""
        self._db.executemany("UPDATE outbox SET delivered_at=NULL WHERE id=?", [(i,) for i in ids])

    def mark_reports(self, ids: list[int], ts: float) -> None:
        self._db.executemany("UPDATE outbox SET delivered_at=? WHERE id=?", [(ts, i) for i in ids])

    # -- messages waiting for a job -----------------------------------------------------------
    def add_message(self, job_id: str, text: str, ts: float) -> int:
        cur = self._db.execute("INSERT INTO inbox (job, text, created_at) VALUES (?, ?, ?)", (job_id, text, ts))
        return int(cur.lastrowid or 0)

    def pending_messages(self, job_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT id, job, text, created_at FROM inbox WHERE job=? AND delivered_at IS NULL ORDER BY id", (job_id,))
        return [dict(r) for r in rows]

    def next_message(self, job_id: str) -> dict[str, Any] | None:
        """The oldest message waiting for a job (read by index, one row)."""
        row = self._db.execute("SELECT id, job, text, created_at FROM inbox WHERE job=? AND delivered_at IS NULL "
                               "ORDER BY id LIMIT 1", (job_id,)).fetchone()
        return dict(row) if row else None

    def pending_count(self, job_id: str) -> int:
        row = self._db.execute("SELECT COUNT(*) FROM inbox WHERE job=? AND delivered_at IS NULL", (job_id,)).fetchone()
        return int(row[0])

    def pending_counts(self) -> dict[str, int]:
        """How many messages wait for each job (loaded once at start; the engine keeps them)."""
        rows = self._db.execute("SELECT job, COUNT(*) FROM inbox WHERE delivered_at IS NULL GROUP BY job")
        return {r[0]: int(r[1]) for r in rows}

    def mark_message(self, msg_id: int, ts: float) -> None:
        self._db.execute("UPDATE inbox SET delivered_at=? WHERE id=?", (ts, msg_id))

    def undeliver_message(self, msg_id: int) -> None:
        """Put a message back: the worker did not take it."""
        self._db.execute("UPDATE inbox SET delivered_at=NULL WHERE id=?", (msg_id,))

    def drop_messages(self, job_id: str, ts: float) -> None:
        """Mark every waiting message of a job as settled (a stopped or archived job takes none)."""
        self._db.execute("UPDATE inbox SET delivered_at=? WHERE job=? AND delivered_at IS NULL", (ts, job_id))
