"""A job's live worker slot and the turn in flight: what the daemon holds in memory for a job
while it has a worker, instead of loose flags. A slot exists from the moment its worker is being
started until the worker exits; a job without one has no worker and costs nothing but its record."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

from roost.models import State


class WorkerHandle(Protocol):
    """What the engine needs of a worker process (roost.daemon.worker.Worker, or a test's fake)."""

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

    #: "stop", "archive", "close" or "stopped-before" (a turn of the agent's own begun after a stop).
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


@dataclass
class Slot:
    worker: WorkerHandle
    #: The token its tools prove the job's identity with; dies with the worker.
    token: str
    ready_timeout: float
    launch_session: str | None = None
    phase: Phase = Phase.STARTING
    turn: Turn | None = None
    close_reason: str = ""
    #: Start a new worker once this one has exited (a message came while it was closing).
    reopen: bool = False
    #: Monotonic times the time rules read.
    idle_since: float | None = None
    last_report_at: float | None = None
    done_at: float | None = None
    held_since: float | None = None
    #: When the last word from one of the agent's own subagents came (they keep an idle worker).
    subagent_word_at: float | None = None
    #: Senders waiting for a resume to finish (resolved when the worker is ready or fails).
    resume_replies: list[asyncio.Future[Any]] = field(default_factory=list)
    #: Callers of ``close`` waiting for the worker to be gone.
    close_replies: list[asyncio.Future[Any]] = field(default_factory=list)
    #: Its pending approvals: the daemon's id -> (the worker's own id, when it was asked on the
    #: monotonic clock, which the timeout counts from).
    approvals: dict[str, tuple[str, float]] = field(default_factory=dict)
