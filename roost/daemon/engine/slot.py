"""A job's live worker slot and the turn in flight: what the daemon holds in memory for a job
while it has a worker, instead of loose flags. A slot exists from the moment its worker is being
started until the worker exits; a job without one has no worker and costs nothing but its record."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

from roost.models import Job, State


class WorkerHandle(Protocol):
    """What the engine needs of a worker process (roost.daemon.processes.process.Worker, or a test's fake)."""

    pid: int | None
    closing: bool

    async def start(self) -> None: ...
    async def request(self, kind: str, timeout: float, **fields: Any) -> dict[str, Any]: ...
    async def close(self, grace: float = 3.0) -> None: ...
    def kill(self) -> None: ...


class Phase(str, enum.Enum):
    """Where a worker is: being started (until it answers get_state), ready, or being closed."""

    STARTING = "starting"
    READY = "ready"
    CLOSING = "closing"


@dataclass(frozen=True)
class Ending:
    """Why a turn is being cut short and who asked: a turn that ends ``aborted`` with an ending
    was cut on purpose; one without was aborted by the worker itself (a failed turn)."""

    #: "stop", "archive", "close", "stopped-before" (a turn of the agent's own begun after a stop) or
    #: "over-time" (it ran past ``max_turn_time``: the job is failed already).
    why: str
    #: The job that asked, or "person" or "daemon".
    by: str


@dataclass
class Turn:
    """One prompt handed to the worker (or a turn the agent began itself), until its turn_end (or the
    worker's exit) settles it."""

    run: int
    #: What started it: a message ("prompt"), children's reports ("reports") or the agent itself ("own").
    kind: str
    #: The inbox or outbox ids it carried (put back if the worker does not take it).
    ids: list[int]
    state_before: State
    text_before: str
    #: The job's own report during the turn (status, text), applied when it ends.
    report: tuple[str, str] | None = None
    #: The sender waiting to hear whether the worker took the prompt.
    reply: asyncio.Future[Any] | None = None
    #: Set when someone cut the turn short (a stop, an archive): how its end is read.
    ending: Ending | None = None
    #: A final ``limited`` event in it (the agent's words, the reset in epoch seconds or None):
    #: its failed end leaves the job ``rate_limited`` (roost/daemon/engine/limits.py).
    limit: tuple[str, float | None] | None = None


@dataclass(frozen=True)
class Hold:
    """A provider account's known rate limit (roost/daemon/engine/limits.py): until when (monotonic,
    and epoch seconds for a row's words), and which job met it."""

    at: float
    until: float
    job: str


@dataclass
class Slot:
    worker: WorkerHandle
    #: A hash of the token its tools prove the job's identity with where its process tree cannot
    #: (a worker on another host: docs/protocols.md#authority); dies with the worker.
    token_hash: str
    ready_timeout: float
    launch_session: str | None = None
    phase: Phase = Phase.STARTING
    turn: Turn | None = None
    close_reason: str = ""
    #: Start a new worker once this one has exited (a message came while it was closing).
    reopen: bool = False
    #: Its budget changed and its agent caps spend with the one it started with (Claude Code):
    #: no new turn starts; the job's next ``Due`` between turns closes it (roost/daemon/engine/spend.py).
    restart_for_cap: bool = False
    #: Monotonic times the time rules read.
    idle_since: float | None = None
    last_report_at: float | None = None
    done_at: float | None = None
    held_since: float | None = None
    #: When the last word from one of the agent's own subagents came (they keep an idle worker).
    subagent_word_at: float | None = None
    #: The commands the agent runs in the background of the job (their ids; a stop aborts them too).
    background: set[str] = field(default_factory=set)
    #: Senders waiting for a resume to finish (resolved when the worker is ready or fails).
    resume_replies: list[asyncio.Future[Any]] = field(default_factory=list)
    #: Callers of ``close`` waiting for the worker to be gone.
    close_replies: list[asyncio.Future[Any]] = field(default_factory=list)
    #: Its pending approvals: the daemon's id -> (the worker's own id, when it was asked on the
    #: monotonic clock, which the timeout counts from).
    approvals: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: The whole request of each pending approval too long to keep whole in the record (the daemon's
    #: id -> its ``what`` as the agent sent it): what the person reads before answering.
    whole: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Rate limits (roost/daemon/engine/limits.py): when its bounced turn may go again (monotonic;
    #: None: not held by time), whether it waits for a person (``on_rate_limit = "ask"``), and how
    #: many turns in a row were bounced (the back-off without a reset time doubles with each).
    limit_at: float | None = None
    asked: bool = False
    bounces: int = 0
    #: Its next turn waits until then for a limit another job met on its account (monotonic).
    account_wait: float | None = None
    #: What the stall rules read (roost/daemon/engine/stall_watch.py; monotonic): when a prompt went
    #: to the worker that has not taken it yet, when the turn began, the agent's last event and its kind.
    accepted_at: float | None = None
    turn_started_at: float | None = None
    last_event_at: float | None = None
    last_event: str = ""
    #: The sequence number of the worker's last line whose events are applied (its shim's): written
    #: with the record (``Job.live``), so a daemon that re-adopts the worker takes nothing twice.
    seq: int = 0
    #: Its adapter's snapshot after that line (None: an adapter that keeps nothing), written with it:
    #: what a re-adopting daemon's adapter is restored from (roost/drivers/base.py ``Adapter.snapshot``).
    adapter: dict[str, Any] | None = None


def live_of(slot: Slot | None) -> dict[str, Any] | None:
    """What a later daemon needs of a live worker to re-adopt it with its turn (``Job.live``)."""
    if slot is None:
        return None
    turn = slot.turn
    live = {"seq": slot.seq, "phase": slot.phase.value, "turn": None if turn is None else {
        "run": turn.run, "kind": turn.kind, "ids": list(turn.ids), "state_before": turn.state_before.value,
        "text_before": turn.text_before, "report": list(turn.report) if turn.report else None,
        "ending": [turn.ending.why, turn.ending.by] if turn.ending else None}}
    if slot.adapter is not None:
        live["adapter"] = slot.adapter
    return live


def turn_of(data: dict[str, Any] | None) -> Turn | None:
    """The turn ``live_of`` wrote down."""
    if not data:
        return None
    report, ending = data.get("report"), data.get("ending")
    return Turn(run=int(data["run"]), kind=str(data["kind"]), ids=[int(i) for i in data["ids"]],
                state_before=State(data["state_before"]), text_before=str(data["text_before"]),
                report=(str(report[0]), str(report[1])) if report else None,
                ending=Ending(str(ending[0]), str(ending[1])) if ending else None)


def stoppable(job: Job, slot: Slot | None) -> bool:
    """Whether a stop has something to stop: what ``Job.stoppable`` says, or a command the agent
    runs in the background of the job (its worker's, so only the slot knows it)."""
    return job.stoppable() or (slot is not None and bool(slot.background) and job.archived_at is None)
