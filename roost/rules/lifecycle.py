"""The daemon's lifecycle rules: when a worker is closed, and what happens to a child's report.

Pure functions of a job's record, what the daemon knows about its worker, its children, the
config and the time (passed in). The daemon calls them on every tick; tests call them directly.
docs/lifecycle.md explains them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from roost.models import ACTIVE_STATES, Job, State


class LifecycleConfig(Protocol):
    idle_timeout: float
    subagent_auto_close: bool
    subagent_auto_close_delay: float
    report_hold_max: float
    wake_reaped_parent: bool


@dataclass(frozen=True)
class WorkerFacts:
    """What the daemon knows about a job's worker beyond its record."""

    up: bool = False
    in_turn: bool = False
    #: Starting, stopping or already closing: not a moment to close it.
    busy: bool = False
    attached: bool = False
    queued: int = 0
    #: When its last turn ended (None while one runs or none ran).
    idle_since: float | None = None
    #: When it last reported to its parent.
    last_report_at: float | None = None
    #: When it last handed back ``done`` (a turn that ended after ``report done``).
    done_at: float | None = None
    #: Whether its owner (the parent) has a worker up: what keeps a workflow or session child.
    owner_up: bool = False


def close_blocker(job: Job, worker: WorkerFacts, children: Iterable[Job]) -> str | None:
    """Why the worker must not be closed now, or None when nothing holds it."""
    if not worker.up:
        return "no worker"
    if job.pinned:
        return "pinned"
    if worker.attached:
        return "attached"
    if worker.in_turn:
        return "a turn is running"
    if worker.busy:
        return "starting or stopping"
    if worker.queued:
        return "messages are queued"
    if any(child.state in ACTIVE_STATES and child.archived_at is None for child in children):
        return "a child is still running"
    return None


def reap_due(job: Job, worker: WorkerFacts, children: Iterable[Job], config: LifecycleConfig, now: float) -> bool:
    """The idle reaper: a worker idle for ``idle_timeout`` with nothing holding it. A ``workflow``
    or ``session`` child is kept while its owner's worker is up: its owner closes it."""
    if config.idle_timeout <= 0:  # 0 turns the reaper off
        return False
    if close_blocker(job, worker, children) is not None or worker.idle_since is None:
        return False
    if job.lifetime != "task" and worker.owner_up:  # kept for as long as its owner runs
        return False
    return now - worker.idle_since >= config.idle_timeout


def auto_close_due(job: Job, worker: WorkerFacts, children: Iterable[Job], config: LifecycleConfig,
                   now: float) -> bool:
    """Subagent auto-close: a ``task`` child that handed back ``done`` closes ``delay`` after its
    last report, once done for half the delay, under the reaper's checks."""
    if not config.subagent_auto_close or job.parent is None or job.lifetime != "task":
        return False
    if close_blocker(job, worker, children) is not None:
        return False
    if job.state == State.DONE:
        done_at = max(job.state_since, worker.done_at or 0.0)
    elif job.state == State.IDLE and worker.done_at is not None:
        done_at = worker.done_at
    else:
        return False
    delay = config.subagent_auto_close_delay
    last_report = max(worker.last_report_at or done_at, done_at)
    return now - last_report >= delay and now - done_at >= delay / 2


def report_action(parent: Job, worker: WorkerFacts, question: bool, oldest_held: float | None,
                  config: LifecycleConfig, now: float) -> str:
    """What to do with reports waiting for ``parent``:

    - ``drop``: the parent is archived; nobody will read them.
    - ``queue``: keep them until the parent's worker runs (stopped parents, reaped parents unless
      ``wake_reaped_parent``).
    - ``wake``: resume the reaped parent with them.
    - ``deliver``: the parent is up and between turns; send them as its next prompt.
    - ``steer``: its turn runs, but a question must not wait, or the hold ran out.
    - ``hold``: its turn runs; deliver batched when it ends.
    """
    if parent.archived_at is not None:
        return "drop"
    if parent.state == State.STOPPED:
        return "queue"
    if not worker.up:
        return "wake" if config.wake_reaped_parent and parent.state != State.FAILED else "queue"
    if worker.busy:
        return "hold"
    if not worker.in_turn:
        return "deliver"
    if question:
        return "steer"
    if config.report_hold_max <= 0 or (oldest_held is not None and now - oldest_held >= config.report_hold_max):
        return "steer"
    return "hold"


def reports_opted_out(labels: dict[str, str]) -> bool:
    """The ``roost.reports=off`` label (on the parent or on the child) silences reports."""
    return labels.get("roost.reports", "").lower() in {"off", "false", "0", "no"}
