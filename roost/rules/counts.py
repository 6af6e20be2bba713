"""What "working" and "queued" mean wherever roost counts them: the app's top bar, ``roost daemon
status``, and a queued row's reason.

One definition, so the numbers agree: a job is *working* while its worker starts or runs a turn
(``starting``, ``working``), a subagent as much as a top-level job — they all take a run slot;
*queued* while it waits for one. The run slots used are the daemon's own count under
``max_running_jobs`` (a parent whose subagents run holds none: it handed its work down), so the
bar can say why queued jobs wait. Pure functions of a tally of non-archived jobs by (state, is a
subagent), which the daemon keeps as jobs change (never recounted), and the config's cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from roost.models import State

__all__ = ["WORKING_STATES", "WorkCounts", "slot_wait", "work_counts", "work_parts"]

#: States in which a job's worker starts or runs a turn: what "working" counts.
WORKING_STATES = frozenset({State.STARTING, State.WORKING})


@dataclass(frozen=True)
class WorkCounts:
    """Working jobs (``subagents`` of them have a parent), queued jobs, and the run slots used of
    ``cap`` (0: no cap)."""

    working: int = 0
    subagents: int = 0
    queued: int = 0
    slots_used: int = 0
    cap: int = 0

    def to_wire(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any] | None) -> "WorkCounts":
        """Counts the daemon sent; a field it did not send (an older daemon) is 0."""
        data = data or {}
        return cls(**{name: int(data.get(name) or 0) for name in cls.__dataclass_fields__})


def work_counts(tally: Mapping[tuple[State, bool], int], slots_used: int, cap: int) -> WorkCounts:
    """The counts from a tally of non-archived jobs by (state, has a parent)."""
    working = sum(n for (state, _), n in tally.items() if state in WORKING_STATES)
    subagents = sum(n for (state, child), n in tally.items() if state in WORKING_STATES and child)
    queued = sum(n for (state, _), n in tally.items() if state is State.QUEUED)
    return WorkCounts(working, subagents, queued, slots_used, cap)


def slot_wait(used: int, cap: int) -> str:
    """What a job queued for ``max_running_jobs`` waits for: ``waiting for a run slot (3 of 3 used)``."""
    return f"waiting for a run slot ({used} of {cap} used)"


def work_parts(counts: WorkCounts) -> list[str]:
    """How the top bar and ``roost daemon status`` say the counts: ``5 working (4 subagents)``, and
    when jobs wait, ``4 queued (3 of 3 run slots used)``."""
    working = f"{counts.working} working"
    if counts.subagents:
        working += f" ({counts.subagents} subagent{'' if counts.subagents == 1 else 's'})"
    parts = [working]
    if counts.queued:
        slots = f" ({counts.slots_used} of {counts.cap} run slots used)" if counts.cap else ""
        parts.append(f"{counts.queued} queued{slots}")
    return parts
