"""How many bytes of output each job's timeline holds, and dropping the oldest of it when a job
goes past ``max_timeline_bytes`` (docs/reliability.md#quotas).

Output is the entries of OUTPUT_KINDS, counted as stored (their JSON). A job's count is read from
the store the first time it is needed after a start (that reads at most the bound, since the
bound keeps it there) and then kept as entries come and go. Anything rolled back makes the counts
unknown again, so they never drift from the store.
"""

from __future__ import annotations

import sqlite3

#: The timeline entries a job's output is made of (each at most ENTRY_MAX of text): what the bound
#: counts and what goes, oldest first, past it. Prompts, messages, reports, state changes,
#: approvals and the rest are never dropped.
OUTPUT_KINDS = ("text", "tool", "note", "error")
#: Past the bound, output goes until the job holds this share of it (so a drop is rare, not one per entry).
KEEP_SHARE = 0.75
#: Entries deleted by one statement (SQLite's bound on ``?`` is higher).
_AT_ONCE = 500
_KINDS = f"kind IN ({', '.join(repr(k) for k in OUTPUT_KINDS)})"


class OutputBytes:
    """The counts, over the store's connection (the caller holds the transaction)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._bytes: dict[str, int] = {}

    def of(self, job: str) -> int:
        """The bytes of output ``job``'s timeline holds."""
        known = self._bytes.get(job)
        if known is None:
            known = self._bytes[job] = self._db.execute(
                f"SELECT COALESCE(SUM(LENGTH(CAST(data AS BLOB))), 0) FROM timeline WHERE job=? AND {_KINDS}",
                (job,)).fetchone()[0]
        return known

    def added(self, job: str, kind: str, size: int) -> None:
        """An entry of ``size`` bytes was stored."""
        if kind in OUTPUT_KINDS and job in self._bytes:
            self._bytes[job] += size

    def forget(self) -> None:
        """Something was rolled back: every count is read again when next needed."""
        self._bytes.clear()

    def drop_oldest(self, job: str, bound: int) -> tuple[int, int]:
        """Delete ``job``'s oldest output until it holds at most KEEP_SHARE of ``bound`` bytes (its
        search index rows with it); how many entries and bytes went."""
        over = self.of(job) - int(bound * KEEP_SHARE)
        if over <= 0:
            return 0, 0
        seqs: list[int] = []
        freed = 0
        cur = self._db.execute(f"SELECT seq, LENGTH(CAST(data AS BLOB)) FROM timeline WHERE job=? AND {_KINDS} "
                               "ORDER BY seq", (job,))
        for seq, size in cur:
            if freed >= over:
                break
            seqs.append(seq)
            freed += size
        cur.close()
        for at in range(0, len(seqs), _AT_ONCE):
            part = seqs[at:at + _AT_ONCE]
            marks = ", ".join("?" * len(part))
            self._db.execute(f"DELETE FROM timeline_fts WHERE rowid IN ({marks})", part)
            self._db.execute(f"DELETE FROM timeline WHERE seq IN ({marks})", part)
        self._bytes[job] -= freed
        return len(seqs), freed
