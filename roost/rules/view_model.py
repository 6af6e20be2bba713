"""The agent view's rows and the top bar's counts, kept between updates and changed by the rows
that changed (issue 20: a one-row update at 10,000 rows costs what one row costs).

``roost.rules.views.agent_view_rows`` and ``header_counts`` read every row; the screen keeps an
``AgentListing`` instead and tells it which rows changed. A row that stays where it was (same
parent, creation time, archived or not and, for a child in "hide" mode, whether it is listed)
gets a new line in place and moves the counts by its old and new value; anything else (a row
came, left or moved in the tree) lists every row again with ``agent_view_rows``, so the two can
never disagree. Pure code: no I/O, no Textual, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from roost.models import ACTIVE_STATES, NEEDS_INPUT_STATES, Row, State
from roost.rules.views import AGENT_VIEW_MODES, AgentViewRow, agent_view_rows, check_mode, summary_text

__all__ = ["COUNTED", "AgentListing", "Counts", "answerable", "header_counts", "row_counts"]


#: What the top bar counts over the listed rows, in ``header_counts``' order.
COUNTED = ("jobs", "needs you", "failed")


def row_counts(row: Row) -> tuple[int, ...]:
    """One listed row's share of each of ``COUNTED``."""
    return (1, int(row.state in NEEDS_INPUT_STATES), int(row.state is State.FAILED))


@dataclass
class Counts:
    """Sums of ``row_counts``: the agent view keeps them and moves them by a changed row's old
    and new share (``AgentListing``), instead of counting every row again."""

    totals: list[int] = field(default_factory=lambda: [0] * len(COUNTED))

    def add(self, row: Row, sign: int = 1) -> None:
        for index, share in enumerate(row_counts(row)):
            self.totals[index] += sign * share

    def as_dict(self) -> dict[str, int]:
        return dict(zip(COUNTED, self.totals))


def header_counts(rows: Iterable[Row]) -> dict[str, int]:
    """The top bar's counts of listed rows: jobs, needing a person, failed. (Working and queued
    count every job, subagents too: roost/rules/counts.py.)"""
    counts = Counts()
    for row in rows:
        counts.add(row)
    return counts.as_dict()


def answerable(row: Row) -> int:
    """How many of a row's pending approvals a person can answer: entries with an id, as
    roost/tui/approval_text.py's ``row_approvals`` keeps them."""
    return sum(1 for entry in row.job.approvals if isinstance(entry, Mapping) and entry.get("id"))


def _placement(row: Row | None, mode: str) -> tuple[object, ...] | None:
    """What decides where a row is listed, and whether: while it stays, the row keeps its place.
    A root is listed whatever its state; a child in "hide" mode only while its parent is closed
    and it works or waits (its parent's presence is the parent's own placement)."""
    if row is None or row.job.archived_at is not None:
        return None
    job = row.job
    if job.parent is None or mode != "hide":
        return (job.parent, job.created_at)
    return (job.parent, job.created_at, row.parent_open, row.state in ACTIVE_STATES)


class AgentListing:
    """The agent view's lines in order and the counts over them, for the rows last given."""

    def __init__(self, mode: str = "hide") -> None:
        check_mode(mode, AGENT_VIEW_MODES, "agent view")
        self.mode = mode
        self.items: list[AgentViewRow] = []
        #: ``header_counts`` of the listed rows, and the approvals they ask (``answerable``).
        self.counts = Counts()
        self.approvals = 0
        self._rows: dict[str, Row] = {}
        self._where: dict[str, int] = {}

    def reset(self, rows: Mapping[str, Row]) -> None:
        """List every row again (the first draw, or a row that came, left or moved)."""
        self._rows = dict(rows)
        self.items = agent_view_rows(self._rows.values(), self.mode)
        self._where = {item.row.id: number for number, item in enumerate(self.items)}
        self.counts, self.approvals = Counts(), 0
        for item in self.items:
            self._count(item.row, 1)

    def update(self, rows: Mapping[str, Row], changed: Iterable[str]) -> set[str] | None:
        """Take ``rows`` (every row, by id), of which only ``changed`` differ from the last ones.
        Returns the ids of the listed lines that changed in place, or None when the rows were
        listed again (then any line may have changed, moved, come or gone)."""
        changed = set(changed)
        if len(rows) != len(self._rows) or any(_placement(rows.get(job_id), self.mode) != _placement(self._rows.get(job_id), self.mode)
               for job_id in changed):
            self.reset(rows)
            return None
        moved: set[str] = set()
        for job_id in changed:
            row = rows.get(job_id)
            if row is None:  # absent before and after (placement None both times)
                self._rows.pop(job_id, None)
                continue
            self._rows[job_id] = row
            number = self._where.get(job_id)
            if number is None:
                continue
            item = self.items[number]
            self._count(item.row, -1)
            self._count(row, 1)
            self.items[number] = AgentViewRow(row, item.prefix, item.depth, summary_text(row))
            moved.add(job_id)
        return moved

    def _count(self, row: Row, sign: int) -> None:
        self.counts.add(row, sign)
        if row.job.approvals:  # most rows ask nothing
            self.approvals += sign * answerable(row)
