"""Which rows need a person, in what order the app's jump key (``w``) visits them, and when the
app may tell the person outside it.

Pure functions of the rows the view lists, in the view's order. A row needs you when its job
waits on an approval, asks a question (``waiting``, ``blocked``), failed and nobody looked since,
or ended its turn and nobody looked since (``Job.unseen``, kept by the daemon so every client
agrees). The jump goes to the most urgent kind first: approvals, then questions, then failures,
then finished jobs; within a kind, in the view's order.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

from roost.models import NEEDS_INPUT_STATES, UNSEEN_STATES, Row, State

__all__ = ["Attention", "attention_kind", "jump_order", "may_notify", "next_attention", "unseen_mark"]


class Attention(enum.IntEnum):
    """Why a row needs you; the value is its place in the jump's order (lowest first)."""

    APPROVAL = 0
    QUESTION = 1
    FAILURE = 2
    FINISHED = 3

    @property
    def word(self) -> str:
        """How the app says it: ``approval``, ``question``, ``failed``, ``finished``."""
        return _WORDS[self]


_WORDS = {Attention.APPROVAL: "approval", Attention.QUESTION: "question", Attention.FAILURE: "failed",
          Attention.FINISHED: "finished"}


def unseen_mark(row: Row) -> bool:
    """Whether the row is marked as ended and not yet seen (its turn ended while nobody had it
    open); the mark goes once a person opens it, or the job works again."""
    return row.job.unseen and row.state in UNSEEN_STATES


def attention_kind(row: Row) -> Attention | None:
    """Why the row needs a person, or None when it does not."""
    if row.job.approvals:
        return Attention.APPROVAL
    if row.state in NEEDS_INPUT_STATES:
        return Attention.QUESTION
    if unseen_mark(row):
        return Attention.FAILURE if row.state is State.FAILED else Attention.FINISHED
    return None


def next_attention(rows: Sequence[Row], current: str | None) -> tuple[Row, Attention] | None:
    """The row the jump goes to from ``current`` (the cursor's row id): the next in the jump's
    order after it, wrapping, or the first when ``current`` needs nothing; None when no row needs
    you."""
    order = sorted(((kind, i, row) for i, row in enumerate(rows) if (kind := attention_kind(row)) is not None),
                   key=lambda item: (item[0], item[1]))
    if not order:
        return None
    ids = [row.id for _, _, row in order]
    at = ids.index(current) + 1 if current in ids else 0
    kind, _, row = order[at % len(order)]
    return row, kind


def jump_order(rows: Iterable[Row]) -> list[Row]:
    """The rows the jump visits from a job screen, in the agent view's order (newest first): every
    job the app holds, its listed rows and the open job's subtree alike."""
    return sorted((row for row in rows if row.job.archived_at is None), key=lambda row: (-row.job.created_at, row.id))


def may_notify(focused: bool | None, last_sent: float | None, now: float, interval: float) -> bool:
    """Whether the app may send a notification now: not while the terminal says it has the focus
    (``focused`` None: it never said, so the app cannot know and notifies), and at most one per
    ``interval`` seconds (``last_sent`` None: none sent yet)."""
    if focused:
        return False
    return last_sent is None or now - last_sent >= interval
