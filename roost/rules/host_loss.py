"""How long roost goes on retrying a dropped SSH link, and when a host counts as lost.

A pure function of when the link was lost, the time now (the daemon's monotonic clock, passed in)
and the config's ``host_lost_after``: while the host may still come back, how long to wait before
the next try (1, 2, 4 … up to ``RETRY_MAX`` seconds, never past the deadline); once it is past,
the reason its jobs fail with, naming the host and how long it was lost (docs/hosts.md#a-dropped-link);
and how long the shim there waits for a daemon before it ends the worker itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from roost.rules.row_text import format_age

#: The first wait between two tries of a dropped link, and the longest.
RETRY_FIRST = 1.0
RETRY_MAX = 30.0


@dataclass(frozen=True)
class Verdict:
    """What to do next: wait ``wait`` seconds and try again, or give up with ``reason``."""

    wait: float = 0.0
    reason: str = ""


def retry_delay(attempt: int) -> float:
    """The wait after the ``attempt``-th failed try (0 the first): doubling, at most RETRY_MAX."""
    return min(RETRY_MAX, RETRY_FIRST * 2 ** min(attempt, 16))


def shim_alone_after(lost_after: float) -> float:
    """How long a worker's shim on the host runs on with no daemon connected before it ends the worker:
    past the daemon's own deadline by up to one retry, so a daemon that still tries finds it there."""
    return lost_after + min(RETRY_MAX, lost_after)


def after_failed_try(host: str, lost_since: float, now: float, lost_after: float, attempt: int,
                     why: str = "") -> Verdict:
    """After a try that failed (``why``, ssh's words): the wait before the next, or, at or past
    ``lost_after`` since the link was lost, the reason the host's jobs fail."""
    lost_for = now - lost_since
    if lost_for >= lost_after:
        said = f": {why}" if why else ""
        return Verdict(reason=f"host {host} was lost for {format_age(lost_for)} (over host_lost_after = "
                              f"{lost_after:g}s){said}")
    return Verdict(wait=max(0.0, min(retry_delay(attempt), lost_after - lost_for)))
