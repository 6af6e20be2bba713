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
import os
import shutil
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roost.daemon.gitrun import git, git_chunks
from roost.paths import make_private_dir

#: Bytes of diff text one snapshot keeps; past it the text is cut (``cut`` says so).
DIFF_MAX = 256 * 1024 * 1024
#: Snapshots kept (their files deleted as they go, least recently read first).
SNAPSHOTS_MAX = 8
#: Bytes of ``--numstat -z`` read for the file list, and the most files it lists.
NUMSTAT_MAX = 16 * 1024 * 1024
FILES_MAX = 2000
#: The diff as a person reviews it: no colour, no external diff or textconv programs.
_DIFF = ("diff", "--no-color", "--no-ext-diff", "--no-textconv")


@dataclass
class Snapshot:
    """One state's diff: its text in ``file`` (``size`` bytes), its changed files."""

    id: str
    file: Path
    size: int
    cut: bool
    files: list[dict[str, Any]] = field(default_factory=list)
    files_more: int = 0


@dataclass(frozen=True)
class Source:
    """Where and what to diff: in ``cwd``, ``against`` (the fork, and the branch's tip when the
    worktree is gone), with ``index`` (a worktree's index file) when untracked files count."""

    cwd: str
    against: tuple[str, ...]
    index: Path | None


class DiffCache:
    """The daemon's snapshots: bounded in count, in bytes per snapshot, and in files on disk."""

    def __init__(self, where: Path) -> None:
        self.where = where
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
            files, more = await _numstat(source, env)
            out = self.where / f"{snap_id}.diff"
            size = 0
            with open(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as sink:
                async for chunk in git_chunks(*_DIFF, "--end-of-options", *source.against, "--", cwd=source.cwd,
                                              env=env, limit=DIFF_MAX + 1):
                    size += len(chunk)
                    await asyncio.to_thread(sink.write, chunk)
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)
        snap = Snapshot(snap_id, out, min(size, DIFF_MAX), size > DIFF_MAX, files, more)
        self._kept[snap_id] = snap
        while len(self._kept) > SNAPSHOTS_MAX:
            _, old = self._kept.popitem(last=False)
            old.file.unlink(missing_ok=True)
        return snap

    def close(self) -> None:
        """Delete every snapshot file (the daemon stops)."""
        for snap in self._kept.values():
            snap.file.unlink(missing_ok=True)
        self._kept.clear()


async def _numstat(source: Source, env: dict[str, str]) -> tuple[list[dict[str, Any]], int]:
    """The changed files (the first FILES_MAX) and how many more, read with ``-z`` so a name is
    exactly the name (a tab, a newline, non-ASCII); a rename is listed under its new name."""
    files: list[dict[str, Any]] = []
    more = 0
    pending = b""
    fields: list[bytes] = []
    async for chunk in git_chunks(*_DIFF, "--numstat", "-z", "--end-of-options", *source.against, "--",
                                  cwd=source.cwd, env=env, limit=NUMSTAT_MAX):
        *done, pending = (pending + chunk).split(b"\0")
        fields.extend(done)
        while fields:
            counts = fields[0].split(b"\t", 2)
            if len(counts) < 3:
                fields.pop(0)
                continue
            if counts[2] == b"":  # a rename: the old and the new name follow
                if len(fields) < 3:
                    break
                name, fields = fields[2], fields[3:]
            else:
                name, fields = counts[2], fields[1:]
            if len(files) < FILES_MAX:
                added, deleted = counts[0].decode(), counts[1].decode()
                files.append({"path": name.decode(errors="replace"),
                              "added": int(added) if added.isdigit() else None,
                              "deleted": int(deleted) if deleted.isdigit() else None})
            else:
                more += 1
    return files, more


def read_page(snap: Snapshot, offset: int, page: int) -> tuple[int, int, bytes]:
    """The page of ``snap`` from byte ``offset`` (moved back to a UTF-8 character's start, so no
    page splits one): where it starts, where the next starts, its bytes."""
    lo = max(0, min(offset, snap.size) - 3)
    with open(snap.file, "rb") as source:
        source.seek(lo)
        window = source.read(min(offset, snap.size) - lo + page + 1)
    window = window[:snap.size - lo]
    start = _char_start(window, min(offset, snap.size) - lo)
    end = _char_start(window, min(start + page, len(window)))
    return lo + start, lo + end, window[start:end]


def _char_start(data: bytes, at: int) -> int:
    while 0 < at < len(data) and data[at] & 0xC0 == 0x80:
        at -= 1
    return at
