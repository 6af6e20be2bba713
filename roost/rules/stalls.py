"""When a job that should be doing something has gone quiet: the stall rules.

A pure function of what the daemon knows of one job's turn (its state, when its agent last said
anything and what, when its turn began, when a message was taken for it), the config and the time
(passed in: the daemon's monotonic clock). It says whether the job is flagged, the words its row
shows, and when the answer can next change, so the engine arms one deadline timer for it instead
of polling. docs/agents.md#stalls explains the rules:

- ``not_started``: a message was taken (queued for the job or handed to its worker) and no turn
  began within ``start_stall_after``;
- ``over_time``: a turn has run for ``max_turn_time`` (off by default): the engine fails it, saying so;
- ``stalled``: a ``working`` job's agent has said nothing for ``stall_after``.

An agent's ``retrying`` or ``limited`` event is an event like any other: a job whose agent says it
retries is not silent. Each bound at 0 is off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from roost.models import State
from roost.rules.row_text import format_age

NOT_STARTED, OVER_TIME, STALLED = "not_started", "over_time", "stalled"


class StallConfig(Protocol):
    stall_after: float
    max_turn_time: float
    start_stall_after: float


@dataclass(frozen=True)
class TurnFacts:
    """What the daemon knows of a job's turn (times on its monotonic clock)."""

    state: State
    #: When the job's agent last said anything (any worker event), and its kind ("text", "tool"…).
    last_event_at: float | None = None
    last_event: str = ""
    #: When the turn in flight began (None: no turn runs).
    turn_started_at: float | None = None
    #: When a message was taken for the job whose turn has not begun (None: none waits).
    accepted_at: float | None = None


@dataclass(frozen=True)
class Stall:
    """The verdict: ``flag`` (None, or one of NOT_STARTED, OVER_TIME, STALLED), the words a row
    shows for it, and ``due``: when to ask again (None: nothing changes until the facts do)."""

    flag: str | None = None
    words: str = ""
    due: float | None = None


def stall(facts: TurnFacts, config: StallConfig, now: float) -> Stall:
    """Whether the job is flagged now, and when to look again. The first bound passed wins, in the
    order not started, over its time, stalled; the earliest bound still ahead is ``due``."""
    checks: list[tuple[str, float, str]] = []  # (flag, deadline, words once passed)
    if facts.accepted_at is not None and config.start_stall_after > 0:
        checks.append((NOT_STARTED, facts.accepted_at + config.start_stall_after,
                       f"a message waits to start: taken {format_age(now - facts.accepted_at)} ago, "
                       f"no turn began (start_stall_after = {config.start_stall_after:g}s)"))
    if facts.state == State.WORKING and facts.turn_started_at is not None:
        if config.max_turn_time > 0:
            checks.append((OVER_TIME, facts.turn_started_at + config.max_turn_time,
                           f"the turn has run {format_age(now - facts.turn_started_at)}, over "
                           f"max_turn_time = {config.max_turn_time:g}s"))
        if config.stall_after > 0:
            since = max(t for t in (facts.last_event_at, facts.turn_started_at) if t is not None)
            last = f"last: {facts.last_event}, " if facts.last_event and facts.last_event_at is not None else ""
            checks.append((STALLED, since + config.stall_after,
                           f"stalled: nothing from the agent for {format_age(now - since)} "
                           f"({last}stall_after = {config.stall_after:g}s)"))
    passed = [check for check in checks if check[1] <= now]
    ahead = [deadline for _, deadline, _ in checks if deadline > now]
    due = min(ahead) if ahead else None
    if passed:
        flag, _, words = passed[0]
        return Stall(flag, words, due)
    return Stall(due=due)
