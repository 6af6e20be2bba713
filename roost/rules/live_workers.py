"""The live-worker cap (``max_live_workers``): how many idle workers to close so that the starts
waiting for a place get one, and which — the least recently used that nothing holds.

Every live worker counts, idle ones included: an idle built-in worker holds 22 MB and each agent's
far more, so a parent that spawns thousands of quick children, or a deep chain, would otherwise
grow the machine's memory without bound (issue 18 saw 328 live workers and a load over 200 on two
cores). Pure functions: the run queue (roost/daemon/engine/run_queue.py) gives the counts and facts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from roost.models import Job
from roost.rules.lifecycle import WorkerFacts, close_blocker


@dataclass(frozen=True)
class Idle:
    """A live worker the cap may close: its job, when its last turn ended (monotonic), and whether
    children of its still run (it is then closed only after every other)."""

    job: str
    idle_since: float
    children_running: bool = False


def closable(job: Job, worker: WorkerFacts) -> bool:
    """Whether the cap may close this worker: up and between turns, not pinned, not attached, no
    messages queued (close_blocker), and none of the agent's own subagents running inside it. Its
    record stays; the next message resumes it, and a child's report wakes it. Unlike the idle
    reaper, children still running do not hold it: a chain deeper than the cap would otherwise wait
    for good (each parent held open by a child waiting for the parent's place)."""
    return close_blocker(job, worker, ()) is None and worker.idle_since is not None and not worker.subagents_running


def holds_place(in_turn: bool, children_running: int) -> bool:
    """Whether a live worker takes a place under the cap. One in a turn while children of its
    still run (queued ones too) waits for them — the built-in agent's ``wait-children``, an agent
    polling its children — and cannot be closed: counted, parents waiting in their turns would
    hold every place their children need, which then wait for good (issue 31: a tree under the
    default cap of 16 stopped with 0 of 8 run slots used). Like ``max_running_jobs``, the cap
    counts the work, not those waiting on it; an idle parent still counts, and may be closed."""
    return not (in_turn and children_running > 0)


def places_short(cap: int, live: int, closing: int, waiting: int) -> int:
    """How many more workers must be closed for every waiting start to have a place (and, after a
    reload lowered the cap, for the live ones to fit): the live workers not already closing, plus
    the waiting starts, over the cap. 0 when ``cap`` is 0 (no cap)."""
    if cap <= 0:
        return 0
    return max(0, live - closing + waiting - cap)


def to_close(idle: Iterable[Idle], count: int) -> list[str]:
    """The ``count`` least recently used of the closable workers: those with no child running
    first, then oldest turn end first (the job id breaks ties, so the choice is the same every time)."""
    if count <= 0:
        return []
    return [w.job for w in sorted(idle, key=lambda w: (w.children_running, w.idle_since, w.job))[:count]]
