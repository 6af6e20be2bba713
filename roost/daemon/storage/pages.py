"""Reading a damaged SQLite file page by page, without SQLite, so that a salvage finds every
record on every page that is still whole — not only those reachable from a table's root, which
may be the very page that was lost.

What is read (https://www.sqlite.org/fileformat2.html): the 100-byte header (page size, reserved
bytes, the freelist), the write-ahead log next to the file (its committed frames are newer than
the pages they replace; each frame's checksum is checked, as SQLite does), every table b-tree leaf
page (type 0x0D) with its cells, each cell's overflow chain and its record. Pages on the freelist
are skipped (they hold deleted rows). A cell whose varints, overflow chain, record header or text
do not add up is left out and counted; nothing is guessed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MAGIC = b"SQLite format 3\0"
#: SQLite's default page size (and roost's), used when the header itself is damaged.
_DEFAULT_PAGE = 4096
_LEAF_TABLE = 0x0D
_WAL_MAGIC = {0x377F0682: "<", 0x377F0683: ">"}


class BadCell(ValueError):
    """A cell (or its record) that does not parse: left out of the salvage."""


@dataclass
class LeafCell:
    """One row found on a table leaf page: its rowid and its column values."""

    page: int
    rowid: int
    values: list[Any]


def varint(buf: bytes, at: int) -> tuple[int, int]:
    """SQLite's big-endian varint at ``at``: (value, offset after it)."""
    value = 0
    for i in range(8):
        if at + i >= len(buf):
            raise BadCell("a varint runs past the end")
        byte = buf[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    if at + 8 >= len(buf):
        raise BadCell("a varint runs past the end")
    return (value << 8) | buf[at + 8], at + 9


def _wal_checksum(data: bytes, s0: int, s1: int, order: str) -> tuple[int, int]:
    for x0, x1 in struct.iter_unpack(f"{order}II", data):
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1


class PageFile:
    """The pages of a SQLite file as its last committed state has them (the file, overlaid with
    the committed frames of its ``-wal``). Holds only offsets: pages are read when asked for."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "rb")
        header = self._fh.read(100)
        self.size = self._fh.seek(0, 2)
        self.page_size, reserved = _DEFAULT_PAGE, 0
        if len(header) == 100 and header.startswith(_MAGIC):
            raw = int.from_bytes(header[16:18], "big")
            page = 65536 if raw == 1 else raw
            if page >= 512 and page & (page - 1) == 0:
                self.page_size, reserved = page, header[20]
        self.usable = self.page_size - reserved
        self.pages = -(-self.size // self.page_size)
        self._wal: dict[int, int] = {}
        self._wal_fh = None
        wal = path.with_name(path.name + "-wal")
        if wal.exists():
            self._read_wal(wal)

    def _read_wal(self, wal: Path) -> None:
        """Note where each page's newest committed frame is; stop at the first frame that does
        not check out (a torn write, an old salt), as SQLite's own recovery does."""
        fh = open(wal, "rb")
        head = fh.read(32)
        if len(head) < 32:
            fh.close()
            return
        magic, _version, page_size, _seq, salt1, salt2, c0, c1 = struct.unpack(">8I", head)
        order = _WAL_MAGIC.get(magic)
        if order is None or page_size != self.page_size or _wal_checksum(head[:24], 0, 0, order) != (c0, c1):
            fh.close()
            return
        s0, s1 = c0, c1
        pending: dict[int, int] = {}
        offset = 32
        while True:
            frame = fh.read(24 + page_size)
            if len(frame) < 24 + page_size:
                break
            pgno, commit, f_salt1, f_salt2, f0, f1 = struct.unpack(">6I", frame[:24])
            if (f_salt1, f_salt2) != (salt1, salt2):
                break
            s0, s1 = _wal_checksum(frame[24:], *_wal_checksum(frame[:8], s0, s1, order), order)
            if (s0, s1) != (f0, f1):
                break
            pending[pgno] = offset + 24
            offset += 24 + page_size
            if commit:
                self._wal.update(pending)
                pending.clear()
                self.pages = commit
        if self._wal:
            self._wal_fh = fh
        else:
            fh.close()

    def page(self, number: int) -> bytes | None:
        """Page ``number`` (1-based), or None when the file ends before it."""
        if not 1 <= number <= self.pages:
            return None
        at = self._wal.get(number)
        if at is not None and self._wal_fh is not None:
            self._wal_fh.seek(at)
            data = self._wal_fh.read(self.page_size)
        else:
            self._fh.seek((number - 1) * self.page_size)
            data = self._fh.read(self.page_size)
        return data if len(data) == self.page_size else None

    def free_pages(self) -> set[int]:
        """The pages on the freelist (trunks and leaves), as far as its chain can be read."""
        first = self.page(1)
        if first is None or not first.startswith(_MAGIC):
            return set()
        trunk, total = struct.unpack(">II", first[32:40])
        free: set[int] = set()
        while trunk and trunk not in free and len(free) <= total:
            data = self.page(trunk)
            if data is None:
                break
            free.add(trunk)
            following, count = struct.unpack(">II", data[:8])
            count = min(count, (self.usable - 8) // 4)
            free.update(struct.unpack(f">{count}I", data[8:8 + 4 * count]))
            trunk = following
        return free

    def close(self) -> None:
        self._fh.close()
        if self._wal_fh is not None:
            self._wal_fh.close()


class LeafScan:
    """Every row on every table leaf page not on the freelist, one at a time (memory holds one
    page); ``unreadable`` counts the cells on such pages that could not be read. Rows of SQLite's
    own tables come too: the caller keeps the ones whose shape fits a table it knows."""

    def __init__(self, pages: PageFile) -> None:
        self.pages = pages
        self.unreadable = 0

    def __iter__(self) -> Iterator[LeafCell]:
        pages = self.pages
        free = pages.free_pages()
        for number in range(1, pages.pages + 1):
            if number in free:
                continue
            data = pages.page(number)
            start = 100 if number == 1 else 0
            if data is None or data[start] != _LEAF_TABLE:
                continue
            count = int.from_bytes(data[start + 3:start + 5], "big")
            pointers = start + 8
            if pointers + 2 * count > pages.usable:
                continue  # a header that cannot be one: not a page of cells
            for i in range(count):
                at = int.from_bytes(data[pointers + 2 * i:pointers + 2 * i + 2], "big")
                try:
                    if not pointers + 2 * count <= at < pages.usable:
                        raise BadCell("a cell pointer outside the page")
                    rowid, payload = _cell(pages, data, at)
                    cell = LeafCell(number, rowid, record(payload))
                except BadCell:
                    self.unreadable += 1
                    continue
                yield cell


def _cell(pages: PageFile, data: bytes, at: int) -> tuple[int, bytes]:
    """A table leaf cell's rowid and whole payload (its overflow chain followed)."""
    size, at = varint(data, at)
    rowid, at = varint(data, at)
    if rowid >= 1 << 63:
        rowid -= 1 << 64
    usable = pages.usable
    most = usable - 35
    if size <= most:
        local = size
    else:
        least = (usable - 12) * 32 // 255 - 23
        local = least + (size - least) % (usable - 4)
        if local > most:
            local = least
    if at + local > usable:
        raise BadCell("a cell runs past its page")
    parts = [data[at:at + local]]
    if size > local:
        if at + local + 4 > usable:
            raise BadCell("no room for the overflow page number")
        left = size - local
        if left > (usable - 4) * pages.pages:
            raise BadCell("a payload larger than the file")
        nxt = int.from_bytes(data[at + local:at + local + 4], "big")
        seen: set[int] = set()
        while left > 0:
            if nxt in seen:
                raise BadCell("an overflow chain that loops")
            seen.add(nxt)
            page = pages.page(nxt)
            if page is None:
                raise BadCell(f"overflow page {nxt} is missing")
            take = min(left, usable - 4)
            parts.append(page[4:4 + take])
            left -= take
            nxt = int.from_bytes(page[:4], "big")
        if nxt != 0:
            raise BadCell("an overflow chain longer than its payload")
    return rowid, b"".join(parts)


def record(payload: bytes) -> list[Any]:
    """The values of a record (header of serial types, then the values), checked to fill the
    payload exactly; text must be UTF-8 (roost writes nothing else)."""
    header, at = varint(payload, 0)
    if not at <= header <= len(payload):
        raise BadCell("a record header larger than its record")
    types = []
    while at < header:
        kind, at = varint(payload, at)
        types.append(kind)
    if at != header:
        raise BadCell("a record header that overruns itself")
    values: list[Any] = []
    for kind in types:
        value, at = _value(payload, at, kind)
        values.append(value)
    if at != len(payload):
        raise BadCell("a record whose values do not fill it")
    return values


_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def _value(payload: bytes, at: int, kind: int) -> tuple[Any, int]:
    if kind == 0:
        return None, at
    if kind in _INT_SIZES:
        end = at + _INT_SIZES[kind]
        if end > len(payload):
            raise BadCell("an integer past the record's end")
        return int.from_bytes(payload[at:end], "big", signed=True), end
    if kind == 7:
        if at + 8 > len(payload):
            raise BadCell("a real past the record's end")
        return struct.unpack(">d", payload[at:at + 8])[0], at + 8
    if kind in (8, 9):
        return kind - 8, at
    if kind < 12:
        raise BadCell(f"serial type {kind} is reserved")
    end = at + (kind - 12) // 2
    if end > len(payload):
        raise BadCell("a text or blob past the record's end")
    raw = payload[at:end]
    if kind % 2 == 0:
        return raw, end
    try:
        return raw.decode("utf-8"), end
    except UnicodeDecodeError:
        raise BadCell("text that is not UTF-8") from None


def rows_by_table(cells: Iterable[LeafCell], shapes: dict[str, list[tuple[str, str, bool, bool]]]
                  ) -> Iterator[tuple[str, LeafCell]]:
    """Each cell with the one table (of ``shapes``: name → columns as (name, type, not null,
    is the rowid)) whose columns its values fit; a cell that fits none, or more than one, is
    left out."""
    for cell in cells:
        fits = [name for name, cols in shapes.items() if _fits(cell.values, cols)]
        if len(fits) == 1:
            yield fits[0], cell


def _fits(values: list[Any], cols: list[tuple[str, str, bool, bool]]) -> bool:
    if len(values) != len(cols):
        return False
    for value, (_name, kind, notnull, is_rowid) in zip(values, cols):
        if is_rowid:
            if value is not None:
                return False
        elif value is None:
            if notnull:
                return False
        elif kind == "TEXT" and not isinstance(value, str):
            return False
        elif kind == "REAL" and not isinstance(value, (int, float)):
            return False
        elif kind == "INTEGER" and not isinstance(value, int):
            return False
    return True
