"""The messages a job's mailbox takes: commands from clients and the daemon's rules, and what
its worker did. Each is applied by one handler in ``roost.daemon.engine.transitions``.

A message may carry ``reply``, a future its sender awaits; the handler answers it (``answer``,
``fail``) or keeps it until the outcome is known (a resume answers when the worker is ready).
Either way the engine releases an answer only once the changes it reports are committed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from roost.daemon.engine.slot import WorkerHandle
from roost.daemon.git.teardown import Back
from roost.models import Job
from roost.protocol import ErrorCode, ProtocolError


@dataclass
class Message:
    reply: asyncio.Future[Any] | None = field(default=None, kw_only=True)
    #: What the handler answered: (True, value) or (False, error); None while it keeps the reply.
    outcome: tuple[bool, Any] | None = field(default=None, kw_only=True, repr=False)

    def answer(self, value: Any) -> None:
        self.outcome = (True, value)

    def fail(self, exc: BaseException) -> None:
        if not isinstance(exc, ProtocolError):
            exc = ProtocolError(ErrorCode.INTERNAL, f"internal error: {exc}")
        self.outcome = (False, exc)

    def refuse_unknown(self, job_id: str) -> None:
        self.fail(ProtocolError(ErrorCode.UNKNOWN_JOB, f"no job with id {job_id!r}"))


# -- commands ---------------------------------------------------------------------------------------
@dataclass
class Spawn(Message):
    """A new job: its record, timeline, first message and place in the run queue are decided here,
    in its own mailbox (the supervisor checked its arguments). The answer is its id."""

    job: Job
    prompt: str
    by: str
    #: The budget it is given (usd, tokens), checked by the supervisor (roost/daemon/engine/spend.py).
    budget: tuple[float | None, int | None] = (None, None)


@dataclass
class Attach(Message):
    """A client (``conn``) opened the job; with ``resume``, a closed worker starts again."""

    conn: int
    resume: bool = False


@dataclass
class Release(Message):
    """A client closed the job (or went away)."""

    conn: int


@dataclass
class Shutdown(Message):
    """The daemon shuts down: the worker's turn is aborted, its approvals denied, then it is closed."""


@dataclass
class Start(Message):
    """The run queue let a queued spawn start."""


@dataclass
class Send(Message):
    text: str
    caller: str | None
    #: Set by its handler: the message restarted a stopped job (the sender's answer says so).
    restarted: bool = field(default=False, kw_only=True)


@dataclass
class Stop(Message):
    caller: str | None


@dataclass
class Close(Message):
    reason: str


@dataclass
class Pin(Message):
    pinned: bool


@dataclass
class Seen(Message):
    """A person opened the job: what its turn ended with has been seen."""


@dataclass
class Label(Message):
    key: str
    value: str | None


@dataclass
class Report(Message):
    """The job's own report on its turn (from its roost_report tool)."""

    status: str
    text: str


@dataclass
class Archive(Message):
    pass


@dataclass
class Detach(Message):
    #: The job that asked (an ancestor), None for a person or the daemon's own (archive).
    caller: str | None = None


@dataclass
class Rename(Message):
    title: str


@dataclass
class SetBudget(Message):
    """A person sets the job's budget (``roost budget``): figures left None keep their value."""

    usd: float | None
    tokens: int | None


@dataclass
class Unarchive(Message):
    #: Make it a root: its parent stays archived.
    detach: bool


@dataclass
class Resume(Message):
    """Start the worker again if it is closed (opening a job, or a wake for reports)."""


@dataclass
class Reports(Message):
    """Children's reports wait in this job's outbox: deliver, hold, steer, wake or drop them."""


@dataclass
class Adopt(Message):
    """At start: take over the job's worker, which a past daemon started and left running under its
    shim (``record``: roost.daemon.processes.shim_link.ShimRecord)."""

    record: Any = None


@dataclass
class EndedAtStart(Message):
    """Recovery ended the job's turn — failed (its worker went with the last daemon) or stopped (a
    person's `roost stop` while no daemon ran): its parent hears so, in the stream."""


@dataclass
class AnswerApproval(Message):
    """A person's answer to one of the job's pending approvals (``answer_approval``)."""

    approval: str
    #: "once", "job" or "deny" (roost.protocol.APPROVAL_ANSWERS).
    decision: str
    reason: str = ""
    #: With "job": the allow rule to add (None: the same tool with the same command prefix).
    rule: str | None = None


@dataclass
class Due(Message):
    """A deadline may have passed, or something a time rule reads changed: look again."""


@dataclass
class Evict(Message):
    """The live-worker cap chose this job's idle worker to close for a waiting start: close it if
    nothing holds it still (else the run queue chooses again)."""


@dataclass
class Settled(Message):
    """What became of a job's worktree (roost/daemon/git/worktrees.py): for its record and its timeline."""

    path: str
    #: The worktree is no more (removed, or deleted by hand): the record forgets its path.
    gone: bool
    #: Its branch was deleted too (its base has all of it).
    branch_deleted: bool
    text: str


@dataclass
class Restored(Message):
    """The job's worktree was made again (unarchive): its record has it back."""

    back: Back


# -- what the worker did --------------------------------------------------------------------------------
@dataclass
class WorkerMessage(Message):
    worker: WorkerHandle


@dataclass
class Spawned(WorkerMessage):
    """The process runs (it has a pid); it has not answered yet."""


@dataclass
class StartFailed(WorkerMessage):
    reason: str


@dataclass
class Ready(WorkerMessage):
    data: dict[str, Any]


@dataclass
class NotReady(WorkerMessage):
    reason: str


@dataclass
class PromptAnswer(WorkerMessage):
    run: int
    accepted: bool
    refusal: str = ""


@dataclass
class SteerAnswer(WorkerMessage):
    ids: list[int]
    accepted: bool


@dataclass
class AbortAnswer(WorkerMessage):
    run: int | None  # None: no turn ran (the abort stopped the agent's own subagents)
    ok: bool


@dataclass
class Resynced(WorkerMessage):
    """A re-adopted worker answered get_state, after everything its shim kept: whether a turn runs."""

    busy: bool


@dataclass
class Event(WorkerMessage):
    """The events of one step of the worker (a line of its stdout, a command its adapter took, an
    adapter's timer): one message, so they are committed with its line's seq all or none."""

    events: list[dict[str, Any]]
    #: The sequence number of the worker's last line read (its shim's; 0: none): once committed,
    #: the shim is told it may forget the line (roost/daemon/processes/shim_link.py).
    seq: int = 0
    #: The adapter's snapshot right after the step (None: it keeps nothing), written with the seq.
    state: dict[str, Any] | None = None


@dataclass
class AnswerNotTaken(WorkerMessage):
    """The worker refused (or never answered) an ``approval_answer``."""

    approval: str
    decision: str
    error: str


@dataclass
class Exited(WorkerMessage):
    returncode: int
    stderr_tail: list[str]
