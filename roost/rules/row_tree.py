"""The job rows as a tree (children by parent), kept by changed rows instead of built from every row.

The subagent panel, its footer hint and ``K K`` walk one job's subtree (roost/rules/views.py);
built from every row the app holds, each walk cost what the whole agent view holds. A screen
keeps a ``RowTree`` and puts into it only the rows an update names, so a walk costs its subtree.
Archived rows are never in it: no view shows an archived job. Pure code.
"""

from __future__ import annotations

from collections.abc import Iterable

from roost.models import Row

__all__ = ["RowTree"]


class RowTree:
    """Non-archived rows by id, and by parent id."""

    def __init__(self, rows: Iterable[Row] = ()) -> None:
        self._rows: dict[str, Row] = {}
        self._children: dict[str, dict[str, Row]] = {}
        for row in rows:
            self.put(row.id, row)

    def put(self, job_id: str, row: Row | None) -> None:
        """``job_id``'s row is now ``row``; None (it left) or an archived row takes it out."""
        old = self._rows.pop(job_id, None)
        if old is not None and old.parent is not None:
            siblings = self._children[old.parent]
            del siblings[job_id]
            if not siblings:
                del self._children[old.parent]
        if row is None or row.job.archived_at is not None:
            return
        self._rows[job_id] = row
        if row.parent is not None:
            self._children.setdefault(row.parent, {})[job_id] = row

    def get(self, job_id: str) -> Row | None:
        return self._rows.get(job_id)

    def children(self, parent: str) -> Iterable[Row]:
        """The rows whose parent is ``parent``, in no particular order."""
        return self._children.get(parent, {}).values()

    def below(self, root: str) -> list[Row]:
        """Every row under ``root`` (not ``root`` itself), in no particular order: what may leave
        the panel with time. A corrupt parent cycle cannot loop (no row is visited twice)."""
        out: list[Row] = []
        seen, todo = {root}, [root]
        while todo:
            for child in self.children(todo.pop()):
                if child.id not in seen:
                    seen.add(child.id)
                    out.append(child)
                    todo.append(child.id)
        return out

    def __len__(self) -> int:
        return len(self._rows)
