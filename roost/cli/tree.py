"""The lines of the human `roost ls`: the app's trees, marks and peeks as text."""

from __future__ import annotations

from typing import Any

from roost.models import Row
from roost.rules.row_text import activity_text, spend_text, state_marks
from roost.text import safe_text

#: How much of what a job last said (or asks, or why it failed) a line of `ls` shows.
PEEK_WIDTH = 50


def tree_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row (``rows`` oldest first), as the app lists them: trees newest first, the
    children indented under their parent in the order they were spawned (a row whose parent is
    not among ``rows`` starts a tree of its own); each with the app's marks, ``● ▸`` (the dot
    says whether its worker is up: ○ closed, a message resumes it)."""
    by_parent: dict[str | None, list[dict[str, Any]]] = {}
    ids = {r["id"] for r in rows}
    for r in rows:
        by_parent.setdefault(r["parent"] if r["parent"] in ids else None, []).append(r)
    lines: list[str] = []
    spent = {r["id"]: spend_text(Row.from_wire(r)) for r in rows}  # tokens and cost
    width = max(map(len, spent.values()), default=0)  # a usage column when some job spent anything
    stack = [(r, 0) for r in by_parent.get(None, [])]  # popped from the end: the newest tree first
    while stack:  # depth-first without recursion: a tree can be deeper than Python's stack
        r, depth = stack.pop()
        row = Row.from_wire(r)
        said = activity_text(row, PEEK_WIDTH)[0]  # why it failed, what it asks, or its last line
        peek = f"  — {safe_text(said)}" if said else ""
        title = safe_text(r["title"]).replace("\n", " ")[:40]  # cut what is shown, on one line
        usage = f"{spent[r['id']]:<{width}} " if width else ""
        lines.append(f"{'  ' * depth}{state_marks(row)} {r['id']:<6} {r['state']:<8} {usage}{title}{peek}")
        stack.extend((child, depth + 1) for child in reversed(by_parent.get(r["id"], [])))
    return lines
