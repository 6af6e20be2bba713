"""Opening the store when it may be damaged: a store that SQLite cannot read is moved aside
under a name that says so (never overwritten or deleted), what can be read of it is salvaged
into a new store, and the store keeps a notice saying what happened and where the damaged file
is. The notice goes to every person's client in the hello reply (the CLI says it on stderr of
every command, the app shows a banner) and in ``roost daemon status``, until someone
acknowledges it. docs/reliability.md tells how to get records back by hand.

The salvage reads the damaged file page by page (store_pages), not through SQLite: a table
whose root page is lost still has its rows on its leaf pages, and SQLite cannot reach those.
Nothing is copied to read it, so nothing is left behind."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from pathlib import Path

from roost.daemon.storage.store import Store, StoreDamaged
from roost.daemon.storage.pages import LeafScan, PageFile, rows_by_table
from roost.paths import check_private, open_private

log = logging.getLogger("roost.daemon")

#: Tables whose rows a salvage copies.
_TABLES = ("jobs", "timeline", "outbox", "inbox", "damaged_records")
#: Files SQLite keeps beside the store, moved aside with it.
_SIDE_FILES = ("-wal", "-shm", "-journal")


def open_store(path: Path, state_dir: Path) -> Store:
    """The daemon's store, repaired first if it has to be. Raises UnsafePath for a store another
    user owns or may write (like the config, it is refused, not repaired), and StoreError only
    when the store is sound but not usable (a newer schema): both are left exactly as they are."""
    for f in (path, *(path.with_name(path.name + s) for s in _SIDE_FILES)):
        check_private(f, "store file")
        _owner_only(f)
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    if path.exists() and path.stat().st_size == 0 and _ran_before(state_dir):
        aside = _move_aside(path, "empty")
        store = Store(path)
        _announce(store, f"the store was found empty (0 bytes) and replaced on {when}, although roost has run in "
                         f"{state_dir} before: job records are gone unless you have a copy (session files in "
                         f"{state_dir / 'sessions'} are intact); the empty file was moved to {aside}")
        return store
    as_left = _as_closed(path)
    try:
        store = Store(path)
        problem = None if as_left else store.check()
        if problem is None:
            return store
        store.close()
    except StoreDamaged as exc:
        problem = str(exc)
    aside = _move_aside(path, "damaged")
    store = _fresh(path)
    how = _salvage(aside, store)
    if store.check() is not None:
        store.close()
        store = _fresh(path)
        how = "nothing could be salvaged; a new, empty store was started"
    _announce(store, f"the store was damaged and replaced on {when} ({problem}): {how}; the damaged file is kept "
                     f"in {aside}")
    return store


def closed_cleanly(path: Path) -> None:
    """After the daemon closed the store: note the file as that close left it (its size and
    mtime, no WAL beside it), so the next open need not check it whole. ``PRAGMA quick_check``
    reads every page, half of a start at 150 MB, and grows with the timelines."""
    if path.with_name(path.name + "-wal").exists():
        return  # another connection has it open, or the close did not checkpoint: check next time
    try:
        st = path.stat()
        fd = open_private(_clean_mark(path), append=False)
        try:
            os.write(fd, f"{st.st_size} {st.st_mtime_ns}".encode())
        finally:
            os.close(fd)
    except OSError as exc:  # a full disk: the next open checks the store, which is all it costs
        log.warning("could not note the store's clean close (%s): the next start checks it", exc)


def _as_closed(path: Path) -> bool:
    """Whether the store is exactly as a clean close left it (the mark is used up here, so a
    daemon that dies before its own clean close leaves none): anything else is checked whole."""
    mark = _clean_mark(path)
    try:
        said = mark.read_text()
        mark.unlink()
        st = path.stat()
    except OSError:
        return False
    return said == f"{st.st_size} {st.st_mtime_ns}" and not path.with_name(path.name + "-wal").exists()


def _clean_mark(path: Path) -> Path:
    return path.with_name(path.name + ".clean")


def _owner_only(path: Path) -> None:
    """Make a store file of ours that others may read 0600: SQLite gives the files it makes
    beside the store (``-wal``, ``-shm``, ``-journal``) the store's own mode."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        log.warning("the store file %s was mode %o, readable by others; made 0600", path, mode)
        path.chmod(0o600)


def _ran_before(state_dir: Path) -> bool:
    """Whether the state directory shows roost has worked here (sessions or worker logs)."""
    for sub in ("sessions", "logs"):
        d = state_dir / sub
        if d.is_dir() and any(p.name != "daemon.log" for p in d.iterdir()):
            return True
    return False


def _move_aside(path: Path, why: str) -> Path:
    """Rename the store (and its -wal, -shm and -journal) to ``roost.db.WHY-TIMESTAMP``; never overwrite."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.{why}-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.{why}-{stamp}-{n}")
    path.rename(aside)
    for suffix in _SIDE_FILES:
        extra = path.with_name(path.name + suffix)
        if extra.exists():
            extra.rename(aside.with_name(aside.name + suffix))
    return aside


def _salvage(damaged: Path, store: Store) -> str:
    """Copy into ``store`` every row of ``damaged`` found on a page that is still whole, each
    at the rowid it had; say how many of each kind came back and how many could not be read."""
    shapes = {table: store.table_columns(table) for table in _TABLES}
    try:
        pages = PageFile(damaged)
    except OSError as exc:
        return f"the damaged file could not be read ({exc}), so nothing was salvaged"
    scan = LeafScan(pages)
    found = dict.fromkeys(_TABLES, 0)
    try:
        with store.transaction():
            for table, cell in rows_by_table(scan, shapes):
                cols = shapes[table]
                names = ["rowid"] + [c[0] for c in cols if not c[3]]
                values = [cell.rowid] + [v for v, c in zip(cell.values, cols) if not c[3]]
                found[table] += store.insert_row(table, names, tuple(values))
            store.index_again()  # salvaged entries become searchable as the daemon indexes them
    except (OSError, sqlite3.Error) as exc:  # a read error, a full disk: the damaged file stays for another try
        log.error("the salvage stopped: %s", exc)
        return f"the salvage stopped ({exc}) and kept nothing; a new, empty store was started"
    finally:
        pages.close()
    said = (f"{found['jobs']} job records, {found['timeline']} timeline entries, {found['outbox']} reports and "
            f"{found['inbox']} messages were salvaged into a new store, read page by page")
    if scan.unreadable:
        said += f" ({scan.unreadable} rows on damaged pages could not be read)"
    return said


def _fresh(path: Path) -> Store:
    path.unlink(missing_ok=True)
    return Store(path)


def _announce(store: Store, text: str) -> None:
    log.error("STORE REPAIRED: %s", text)
    store.set_notice(text)
