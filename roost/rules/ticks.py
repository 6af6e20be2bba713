"""When what the app shows next changes with time alone, so a screen's timer runs only then.

An age floors to its largest unit (``format_age``), so "3m" next changes at the next whole
minute of the job's age, and a finished job's age stops growing; a row whose state changed
less than the finished-row lifetime ago may leave its place (the panel, the footer hint) when
that lifetime ends. Pure functions of the rows and the clock (the ``now`` parameter).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from roost.models import FINISHED_STATES, Row
from roost.rules.row_text import age_seconds

__all__ = ["age_changes_in", "next_age_change", "next_lifetime_end"]

_UNITS = (86400, 3600, 60)


def age_changes_in(seconds: float) -> float:
    """Seconds until ``format_age`` of an age now ``seconds`` old shows another text (an age
    below one second reads "0s" until it is one second); infinite for an age that is not a number."""
    if math.isnan(seconds) or math.isinf(seconds):
        return math.inf
    if seconds < 1:
        return 1 - seconds
    size = next((size for size in _UNITS if seconds >= size), 1)
    return (math.floor(seconds / size) + 1) * size - seconds


def next_age_change(rows: Iterable[Row], now: float) -> float | None:
    """Seconds until the first of ``rows`` shows another age, or None when none of them grows
    (a finished job shows its run time, which no longer changes)."""
    soonest = min((age_changes_in(age_seconds(row, now)) for row in rows if row.state not in FINISHED_STATES),
                  default=math.inf)
    return None if math.isinf(soonest) else soonest


def next_lifetime_end(rows: Iterable[Row], now: float, lifetime: float) -> float | None:
    """Seconds until the first of ``rows`` whose state changed less than ``lifetime`` ago gets
    that old (a finished subagent's row leaves the panel then), or None when none is that young."""
    left = [lifetime - (now - row.job.state_since) for row in rows if 0 <= now - row.job.state_since < lifetime]
    return min(left, default=None)
