"""A job's diff made once per state of its worktree and paged from a file (docs/worktrees.md#review-and-merge).

git runs once for each state a worktree is in (its HEAD, its fork from the base, what ``git
status -z`` lists and each listed file's size and mtime): its output goes to a private file,
never whole into memory, and every page of that state is read from the file. A snapshot's id is
a hash of that state, so a page asked for with an id that the cache let go is made again only if
the worktree is still in that state; otherwise the reader is told the diff changed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roost.daemon.git.run import git, git_chunks
from roost.paths import make_private_dir
from roost.protocol import MAX_FRAME

#: Bytes of diff text one snapshot keeps; past it the text is cut (``cut`` says so).
DIFF_MAX = 256 * 1024 * 1024
#: Snapshots kept, and the most bytes their files take together (beyond either, files are
#: deleted least recently read first; the newest is always kept).
SNAPSHOTS_MAX = 8
SNAPSHOTS_BYTES = 512 * 1024 * 1024
#: Bytes of ``--numstat -z`` read for the file list; the most files it lists, and the most bytes
#: they take as JSON (so a reply with them and a page of text stays under MAX_FRAME).
NUMSTAT_MAX = 16 * 1024 * 1024
FILES_MAX = 2000
FILES_BYTES = 192 * 1024
#: The most bytes of text one page carries; its JSON may take MAX_FRAME less the snapshot's file
#: list and REPLY_REST for the rest of the reply, so a page with many characters JSON escapes
#: is shorter.
PAGE_MAX = 960 * 1024
REPLY_REST = 16 * 1024
#: Bytes JSON writes as two characters (``\n``, ``\"``) and as six (``\u001b``).
_ESCAPED_SHORT = b"\b\t\n\f\r\"\\"
_ESCAPED_LONG = bytes(c for c in range(0x20) if c not in b"\b\t\n\f\r")
_HIGH = bytes(range(0x80, 0x100))
#: The diff as a person reviews it: no colour, no external diff or textconv programs, names as
#: they are (only a tab, a newline, a quote or a backslash in a name is quoted in its header).
_DIFF = ("-c", "core.quotePath=false", "diff", "--no-color", "--no-ext-diff", "--no-textconv")


@dataclass
class Snapshot:
    """One state's diff: its text in ``file`` (``size`` bytes), its changed files."""

    id: str
    job: str
    file: Path
    size: int
    cut: bool
    files: list[dict[str, Any]] = field(default_factory=list)
    files_more: int = 0
    #: The most bytes a page's text may take as JSON in a reply with these files.
    page_json: int = MAX_FRAME - FILES_BYTES - REPLY_REST


@dataclass(frozen=True)
class Source:
    """Whose and where and what to diff: ``job``'s, in ``cwd``, ``against`` (the fork, and the
    branch's tip when the worktree is gone), with ``index`` (a worktree's index file) when
    untracked files count."""

    job: str
    cwd: str
    against: tuple[str, ...]
    index: Path | None


class DiffCache:
    """The daemon's snapshots: bounded in count, in bytes per snapshot, and in files on disk."""

    def __init__(self, where: Path) -> None:
        self.where = where
        for left in where.glob("*.diff"):  # an earlier daemon's; no snapshot of them is kept
            left.unlink(missing_ok=True)
        self._kept: OrderedDict[str, Snapshot] = OrderedDict()
        self._making: dict[str, asyncio.Task[Snapshot]] = {}

    def get(self, snapshot_id: str) -> Snapshot | None:
        snap = self._kept.get(snapshot_id)
        if snap is not None:
            self._kept.move_to_end(snapshot_id)
        return snap

    async def snapshot(self, state: str, source: Source) -> Snapshot:
        """The snapshot of ``state``, made (once, however many ask at the same time) if not kept."""
        snap_id = hashlib.sha256(state.encode()).hexdigest()[:32]
        kept = self.get(snap_id)
        if kept is not None:
            return kept
        task = self._making.get(snap_id)
        if task is None:
            task = self._making[snap_id] = asyncio.ensure_future(self._make(snap_id, source))
            task.add_done_callback(lambda _: self._making.pop(snap_id, None))
        return await asyncio.shield(task)

    async def _make(self, snap_id: str, source: Source) -> Snapshot:
        make_private_dir(self.where)
        scratch = Path(tempfile.mkdtemp(dir=self.where))
        try:
            env = {}
            if source.index is not None:  # untracked files as intent-to-add, in a copy of the index
                await asyncio.to_thread(shutil.copyfile, source.index, scratch / "index")
                env = {"GIT_INDEX_FILE": str(scratch / "index")}
                await git("add", "--intent-to-add", "--all", cwd=source.cwd, env=env)
            made = scratch / "diff"  # moved into place whole, or deleted with the scratch directory
            with open(os.open(made, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as sink:
                listing = _Numstat()
                size = 0
                async for chunk in git_chunks(*_DIFF, "--numstat", "-z", "--patch", "--end-of-options",
                                              *source.against, "--", cwd=source.cwd, env=env,
                                              limit=NUMSTAT_MAX + DIFF_MAX + 1):
                    text = listing.feed(chunk) if not listing.done else chunk
                    size += len(text)
                    if text:
                        await asyncio.to_thread(sink.write, text[:max(0, DIFF_MAX - (size - len(text)))])
            out = self.where / f"{snap_id}.diff"
            made.replace(out)
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)
        snap = Snapshot(snap_id, source.job, out, min(size, DIFF_MAX), size > DIFF_MAX, listing.files, listing.more,
                        MAX_FRAME - listing.json_bytes - REPLY_REST)
        self._kept[snap_id] = snap
        while len(self._kept) > 1 and (len(self._kept) > SNAPSHOTS_MAX
                                       or sum(k.size for k in self._kept.values()) > SNAPSHOTS_BYTES):
            _, old = self._kept.popitem(last=False)
            old.file.unlink(missing_ok=True)
        return snap

    def close(self) -> None:
        """Delete every snapshot file (the daemon stops)."""
        for snap in self._kept.values():
            snap.file.unlink(missing_ok=True)
        self._kept.clear()


class _Numstat:
    """The file list at the head of ``git diff --numstat -z --patch`` (one git run gives both):
    ``ADDED\tDELETED\tPATH\0`` per file (a rename: ``ADDED\tDELETED\t\0OLD\0NEW\0``), then an empty
    field, then the patch. Names read with ``-z`` are exactly the names (a tab, a newline,
    non-ASCII); a rename is listed under its new name. Bounded: the first FILES_MAX files, or
    FILES_BYTES of them as JSON, are kept; the rest are counted."""

    def __init__(self) -> None:
        self.files: list[dict[str, Any]] = []
        self.more = 0
        self.done = False
        #: The files' size as JSON.
        self.json_bytes = 0
        self._held = b""
        self._read = 0

    def feed(self, chunk: bytes) -> bytes:
        """Take ``chunk``; what of it is patch text (once the list has ended)."""
        data = self._held + chunk
        at = 0
        while True:
            end = data.find(b"\0", at)
            if end < 0:
                break
            if end == at:  # the empty field: the patch follows
                self.done = True
                return data[end + 1:]
            counts = data[at:end].split(b"\t", 2)
            if len(counts) == 3 and counts[2] == b"":  # a rename: two names follow
                old_end = data.find(b"\0", end + 1)
                new_end = data.find(b"\0", old_end + 1) if old_end >= 0 else -1
                if new_end < 0:
                    break
                name, at = data[old_end + 1:new_end], new_end + 1
            else:
                name, at = (counts[2] if len(counts) == 3 else b""), end + 1
            self._add(counts, name)
        self._read += at
        self._held = data[at:]
        if len(self._held) > NUMSTAT_MAX or self._read > NUMSTAT_MAX:  # not a numstat list: all is patch
            self.done, held, self._held = True, self._held, b""
            return held
        return b""

    def _add(self, counts: list[bytes], name: bytes) -> None:
        added = counts[0].decode(errors="replace")
        deleted = counts[1].decode(errors="replace") if len(counts) > 1 else ""
        entry = {"path": name.decode(errors="replace"), "added": int(added) if added.isdigit() else None,
                 "deleted": int(deleted) if deleted.isdigit() else None}
        cost = len(json.dumps(entry, ensure_ascii=False).encode()) + 1
        if len(self.files) < FILES_MAX and self.json_bytes + cost <= FILES_BYTES:
            self.files.append(entry)
            self.json_bytes += cost
        else:
            self.more += 1


def read_page(snap: Snapshot, offset: int) -> tuple[int, int, bytes]:
    """The page of ``snap`` from byte ``offset`` (moved back to a UTF-8 character's start, so no
    page splits one), as long as its JSON fits the snapshot's ``page_json``: where it starts,
    where the next starts, its bytes."""
    at = min(offset, snap.size)
    lo = max(0, at - 3)
    with open(snap.file, "rb") as source:
        source.seek(lo)
        window = source.read(at - lo + PAGE_MAX + 1)[:snap.size - lo]
    start = _char_start(window, at - lo)
    length = PAGE_MAX
    while True:
        end = _char_start(window, min(start + length, len(window)))
        cost = _json_bound(window[start:end])
        if cost <= snap.page_json or end - start <= 8:
            return lo + start, lo + end, window[start:end]
        length = max(8, (end - start) * snap.page_json // cost)


def _json_bound(data: bytes) -> int:
    """The most bytes ``data`` takes as a JSON string (decoded with errors replaced)."""
    grow = len(data) - len(data.translate(None, _ESCAPED_SHORT))
    grow += 5 * (len(data) - len(data.translate(None, _ESCAPED_LONG)))
    try:
        data.decode()
    except UnicodeDecodeError:  # each bad byte may become U+FFFD, three bytes
        grow += 2 * (len(data) - len(data.translate(None, _HIGH)))
    return len(data) + grow + 2


def _char_start(data: bytes, at: int) -> int:
    while 0 < at < len(data) and data[at] & 0xC0 == 0x80:
        at -= 1
    return at
