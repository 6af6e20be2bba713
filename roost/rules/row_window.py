"""How many rows the app keeps for its agent view: every row that works, waits, failed or has a
worker up, and the ``limit`` newest of the other (finished, closed) roots — what the daemon's
agent view snapshot sends (``JobIndex.agent_view``). Rows pushed afterwards would otherwise pile
up for as long as the app stays open: a flood of short jobs over an hour is thousands of rows.
"""

from __future__ import annotations

from collections.abc import Iterable

from roost.models import ACTIVE_STATES, NEEDS_INPUT_STATES, Row, State

__all__ = ["AGENT_VIEW_WINDOW", "past_window"]

#: The finished roots the agent view keeps: the daemon's snapshot's ``limit``.
AGENT_VIEW_WINDOW = 200


def _kept_always(row: Row) -> bool:
    job = row.job
    return (job.parent is not None or row.state in ACTIVE_STATES or row.state in NEEDS_INPUT_STATES
            or row.state is State.FAILED or job.worker_up)


def past_window(rows: Iterable[Row], limit: int = AGENT_VIEW_WINDOW) -> list[str]:
    """Ids of the rows older than the ``limit`` newest of those not kept always (newest by
    creation, then id): the agent view lets these go, and counts them as older not listed."""
    others = sorted((row for row in rows if not _kept_always(row)), key=lambda row: (row.job.created_at, row.id),
                    reverse=True)
    return [row.id for row in others[limit:]]
