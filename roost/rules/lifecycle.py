"""The daemon's lifecycle rules: when a worker is closed, and what happens to a child's report.

Pure functions of a job's record, what the daemon knows about its worker, its children, the
config and the time (passed in; the daemon's monotonic clock). The engine asks ``next_due`` when
to look at a job again and arms one timer for it; tests call them directly.
docs/lifecycle.md explains them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from roost.models import ACTIVE_STATES, Job, State
from roost.rules.approvals import next_timeout


class LifecycleConfig(Protocol):
    idle_timeout: float
    subagent_auto_close: bool
    subagent_auto_close_delay: float
    report_hold_max: float
    wake_reaped_parent: bool
    approval_timeout: float


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
    #: Since when children's reports wait for its turn to end.
    held_since: float | None = None
    #: The agent's own subagents still working (Claude Code's background ``Task``s run on while
    #: its job is idle), and when the last word from any of them came.
    subagents_running: int = 0
    subagent_word_at: float | None = None
    #: Its worker was closed to make room under ``max_live_workers`` (reports wake it again).
    closed_for_room: bool = False
    #: When each of its pending approvals was asked (the timeout counts from there).
    approvals_asked: tuple[float, ...] = ()
    #: When a rate-limited job's bounced turn may go again (None: no limit holds it by time).
    limit_at: float | None = None
    #: When a stall bound of its turn passes next (roost/rules/stalls.py; None: none ahead).
    stall_due: float | None = None


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
    if job.state == State.RATE_LIMITED:  # its bounced turn goes again at the reset, in this worker
        return "rate limited"
    if worker.approvals_asked:  # its agent waits on a person (a background subagent, between turns)
        return "an approval is pending"
    if worker.busy:
        return "starting or stopping"
    if worker.queued:
        return "messages are queued"
    if any(child.state in ACTIVE_STATES and child.archived_at is None for child in children):
        return "a child is still running"
    return None


def reap_at(job: Job, worker: WorkerFacts, children: Iterable[Job], config: LifecycleConfig) -> float | None:
    """When the idle reaper closes the worker (``idle_timeout`` after its last turn ended), or
    None while something holds it. A ``workflow`` or ``session`` child is kept while its owner's
    worker is up: its owner closes it."""
    if config.idle_timeout <= 0:  # 0 turns the reaper off
        return None
    if close_blocker(job, worker, children) is not None or worker.idle_since is None:
        return None
    if job.lifetime != "task" and worker.owner_up:  # kept for as long as its owner runs
        return None
    # The last word from one of the agent's own subagents counts like the end of a turn: while they
    # run, one silent for the idle timeout is taken as lost; once the last one ended, the agent
    # takes in its result in a turn of its own, which must find its worker still there.
    return max(worker.idle_since, worker.subagent_word_at or 0.0) + config.idle_timeout


def auto_close_at(job: Job, worker: WorkerFacts, children: Iterable[Job], config: LifecycleConfig) -> float | None:
    """Subagent auto-close: when a ``task`` child that handed back ``done`` is closed (``delay``
    after its last report, and done for half the delay), or None while it may not be."""
    if not config.subagent_auto_close or job.parent is None or job.lifetime != "task":
        return None
    if close_blocker(job, worker, children) is not None or worker.done_at is None:
        return None
    if job.state not in (State.DONE, State.IDLE):
        return None
    delay = config.subagent_auto_close_delay
    last_report = max(worker.last_report_at or worker.done_at, worker.done_at)
    at = max(last_report + delay, worker.done_at + delay / 2)
    if worker.subagent_word_at is not None:  # room for the agent's own turn on what one said last
        at = max(at, worker.subagent_word_at + delay)
    if worker.subagents_running:  # closing would kill them: once they end it closes at ``at``
        hold = _subagents_hold(worker, config)
        return None if hold is None else max(at, hold)
    return at


def _subagents_hold(worker: WorkerFacts, config: LifecycleConfig) -> float | None:
    """Until when the agent's own running subagents keep a done child's worker from auto-close:
    ``idle_timeout`` after the last word from any of them (one silent for that long is taken as
    lost), or for as long as they run when the reaper is off (None then)."""
    if not worker.subagents_running or config.idle_timeout <= 0:
        return None
    return (worker.subagent_word_at or worker.idle_since or 0.0) + config.idle_timeout


def reap_due(job: Job, worker: WorkerFacts, children: Iterable[Job], config: LifecycleConfig, now: float) -> bool:
    """Whether the idle reaper closes the worker now."""
    at = reap_at(job, worker, children, config)
    return at is not None and now >= at


def auto_close_due(job: Job, worker: WorkerFacts, children: Iterable[Job], config: LifecycleConfig,
                   now: float) -> bool:
    """Whether subagent auto-close closes the worker now."""
    at = auto_close_at(job, worker, children, config)
    return at is not None and now >= at


def hold_expired(held_since: float | None, config: LifecycleConfig, now: float) -> bool:
    """Whether reports held since ``held_since`` (None: none held yet) may not wait any longer: the
    one definition of the report hold's end, for the timer (``hold_due``) and ``report_action``."""
    return config.report_hold_max <= 0 or (held_since is not None and now >= held_since + config.report_hold_max)


def hold_until(worker: WorkerFacts, config: LifecycleConfig) -> float | None:
    """When reports held during a turn must be steered in anyway (the bounded hold)."""
    if worker.held_since is None or not worker.in_turn:
        return None
    return worker.held_since + config.report_hold_max


def hold_due(worker: WorkerFacts, config: LifecycleConfig, now: float) -> bool:
    """Whether the bounded hold ran out now: the held reports are steered into the turn."""
    return worker.in_turn and worker.held_since is not None and hold_expired(worker.held_since, config, now)


def next_due(job: Job, worker: WorkerFacts, children: Iterable[Job], config: LifecycleConfig) -> float | None:
    """The next moment a time rule may act on this job (auto-close, reap, the report hold, an
    approval's timeout, a rate limit's reset, a stall bound), or None: the engine arms one timer per job for it, so an idle daemon does
    nothing."""
    kids = list(children)
    times = [t for t in (auto_close_at(job, worker, kids, config), reap_at(job, worker, kids, config),
                         hold_until(worker, config), next_timeout(worker.approvals_asked, config.approval_timeout),
                         worker.limit_at, worker.stall_due)
             if t is not None]
    return min(times) if times else None


def report_action(parent: Job, worker: WorkerFacts, question: bool, oldest_held: float | None,
                  config: LifecycleConfig, now: float) -> str:
    """What to do with reports waiting for ``parent``:

    - ``drop``: the parent is archived; nobody will read them.
    - ``queue``: keep them until the parent's worker runs (stopped parents, reaped parents unless
      ``wake_reaped_parent``).
    - ``wake``: resume the reaped parent with them (always one closed only to make room under
      ``max_live_workers``: the cap must not leave a parent asleep that would still be waiting).
    - ``deliver``: the parent is up and between turns; send them as its next prompt.
    - ``steer``: its turn runs, but a question must not wait, or the hold ran out.
    - ``hold``: its turn runs; deliver batched when it ends.
    """
    if parent.archived_at is not None:
        return "drop"
    if parent.state == State.STOPPED:
        return "queue"
    if not worker.up:
        wake = config.wake_reaped_parent or worker.closed_for_room
        return "wake" if wake and parent.state != State.FAILED else "queue"
    if worker.busy:
        return "hold"
    if not worker.in_turn:
        return "deliver"
    if question:
        return "steer"
    if hold_expired(oldest_held, config, now):
        return "steer"
    return "hold"


def reports_opted_out(labels: dict[str, str]) -> bool:
    """The ``roost.reports=off`` label (on the parent or on the child) silences reports."""
    return labels.get("roost.reports", "").lower() in {"off", "false", "0", "no"}
