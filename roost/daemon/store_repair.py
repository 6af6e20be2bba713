"""Opening the store when it may be damaged: a store that SQLite cannot read is moved aside
under a name that says so (never overwritten or deleted), what can be read of it is salvaged
into a new store, and the store keeps a notice saying what happened and where the damaged file is, which
``roost daemon status`` shows until someone acknowledges it. docs/reliability.md tells how to get
records back by hand."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import time
from pathlib import Path

from roost.daemon.store import Store, StoreDamaged

log = logging.getLogger("roost.daemon")

#: Tables whose rows a salvage copies, in an order that keeps references sensible.
_TABLES = ("jobs", "timeline", "outbox", "inbox", "damaged_records")
#: How many damaged stretches one table's salvage steps over before it gives up.
SALVAGE_TRIES = 64


def open_store(path: Path, state_dir: Path) -> Store:
    """The daemon's store, repaired first if it has to be. Raises StoreError only when the store
    is sound but not usable (a newer schema): that one is left exactly as it is."""
    if path.exists() and path.stat().st_size == 0 and _ran_before(state_dir):
        aside = _move_aside(path, "empty")
        store = Store(path)
        _announce(store, f"the store {path} was empty (0 bytes) although roost has run in {state_dir} before; "
                         f"it was moved to {aside} and a new, empty store was started (job records are gone "
                         f"unless you have a copy; session files in {state_dir / 'sessions'} are intact)")
        return store
    try:
        store = Store(path)
        problem = store.check()
        if problem is None:
            return store
        store.close()
    except StoreDamaged as exc:
        problem = str(exc)
    aside = _move_aside(path, "damaged")
    how = _copy_tables(aside, path)
    try:
        store = Store(path)
        if store.check() is not None:
            raise StoreDamaged("the salvaged copy is damaged too")
    except StoreDamaged:
        store = _fresh(path)
        how = "nothing could be salvaged; a new, empty store was started"
    _announce(store, f"the store {path} was damaged ({problem}); it was moved to {aside}; {how}")
    return store


def _ran_before(state_dir: Path) -> bool:
    """Whether the state directory shows roost has worked here (sessions or worker logs)."""
    for sub in ("sessions", "logs"):
        d = state_dir / sub
        if d.is_dir() and any(p.name != "daemon.log" for p in d.iterdir()):
            return True
    return False


def _move_aside(path: Path, why: str) -> Path:
    """Rename the store (and its -wal and -shm) to ``roost.db.WHY-TIMESTAMP``; never overwrite."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.{why}-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.{why}-{stamp}-{n}")
    path.rename(aside)
    for suffix in ("-wal", "-shm"):
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            extra.rename(aside.with_name(aside.name + suffix))
    return aside


def _copy_tables(damaged: Path, into: Path) -> str:
    """Read ``damaged`` table by table in rowid order, skipping over pages that cannot be read.
    A truncated file is first padded back to the size its header says (a copy, in a temp name),
    so SQLite reads what is there instead of refusing the whole file."""
    store = _fresh(into)
    readable = _padded_copy(damaged)
    try:
        src = sqlite3.connect(f"file:{readable}?mode=ro", uri=True)
        for table in _TABLES:
            _copy_table(src, store, table)
        src.close()
    except sqlite3.DatabaseError as exc:
        log.warning("salvage stopped: %s", exc)
    finally:
        readable.unlink(missing_ok=True)
        store.close()
    return f"the rows that could be read were salvaged into a new store ({_count(into)})"


def _padded_copy(damaged: Path) -> Path:
    copy = damaged.with_name(damaged.name + ".reading")
    shutil.copyfile(damaged, copy)
    with open(copy, "r+b") as fh:
        header = fh.read(100)
        if len(header) == 100 and header.startswith(b"SQLite format 3\0"):
            page = int.from_bytes(header[16:18], "big")
            pages = int.from_bytes(header[28:32], "big")
            declared = (65536 if page == 1 else page) * pages
            if declared > copy.stat().st_size:
                fh.truncate(declared)
    return copy


def _copy_table(src: sqlite3.Connection, store: Store, table: str) -> None:
    """Copy the rows of one table that can be read; a damaged stretch is stepped over by
    looking further on in doubling strides."""
    try:
        cols = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
    except sqlite3.DatabaseError:
        return
    try:
        top = src.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
    except sqlite3.DatabaseError:
        top = 1 << 40  # its last pages are gone: walk until the tries run out
    last, stride, tries = 0, 1, 0
    while last < top and tries < SALVAGE_TRIES:
        try:
            cur = src.execute(f"SELECT rowid, {', '.join(cols)} FROM {table} WHERE rowid > ? ORDER BY rowid", (last,))
            for row in cur:
                last = row[0]
                store.insert_row(table, cols, tuple(row[1:]))
                stride = 1
            return
        except sqlite3.DatabaseError:
            tries += 1
            last += stride
            stride *= 2


def _fresh(path: Path) -> Store:
    path.unlink(missing_ok=True)
    return Store(path)


def _count(path: Path) -> str:
    db = sqlite3.connect(path)
    try:
        jobs = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
        entries = db.execute("SELECT COUNT(*) FROM timeline").fetchone()[0]
    except sqlite3.DatabaseError:
        return "its contents could not be counted"
    finally:
        db.close()
    return f"{jobs} job records, {entries} timeline entries"


def _announce(store: Store, text: str) -> None:
    log.error("STORE REPAIRED: %s", text)
    store.set_notice(text)
