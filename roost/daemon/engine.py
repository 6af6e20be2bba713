"""The engine: one ordered mailbox per job, one transition function, deadlines instead of polls.

Every command about a job (send, stop, close, pin, archive, …) and every event of its worker is a
message posted to that job's mailbox; ``apply`` hands each, in order, to the one handler for its
type (``transitions.BY_MESSAGE``). Handlers are synchronous: they change the record, commit, and start
effects (start a process, send a prompt, abort) as tasks whose outcome comes back as another
message. So nothing mutates a job between two messages, and every race — the reaper against a
message, a stop against a new turn, a report while a turn ends — is a question of order.

Time rules are deadlines: after each message the engine asks the pure rules when the job is next
due (``rules.lifecycle.next_due``) and arms one timer for it on the monotonic clock.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Iterable, Protocol

from roost.config import Config
from roost.daemon.approvals import Book
from roost.daemon.index import JobIndex
from roost.daemon.messages import Due, Message, Resync, WorkerMessage
from roost.daemon.run_queue import RunQueue
from roost.daemon.slot import Phase, Slot, Turn
from roost.daemon.store import Store, describe_failure
from roost.daemon.workers import WorkerFactory
from roost.models import REASONED_STATES, UNSEEN_STATES, Job, State
from roost.protocol import ENTRY_MAX, ErrorCode, ProtocolError
from roost.rules.lifecycle import WorkerFacts, next_due
from roost.rules.state_table import check as check_transition

if TYPE_CHECKING:
    from roost.daemon.publisher import Publisher

log = logging.getLogger("roost.daemon")

#: How many effects of one tree operation (aborts, closes) run at once.
FAN_OUT = 32
#: The most messages one transaction applies before the loop serves others again.
BATCH = 512
#: How soon, and at most how long apart, a change the store refused is tried again.
RETRY_FIRST = 0.5
RETRY_MAX = 30.0


class StateListener(Protocol):
    """Told of every committed state change (the daemon's hooks)."""

    def job_changed(self, row: dict[str, Any], old: str, new: str) -> None: ...


class Engine:
    """The state every handler works on, and the machinery that orders them."""

    def __init__(self, store: Store, index: JobIndex, publisher: "Publisher", config: Callable[[], Config],
                 make_worker: WorkerFactory, clock: Callable[[], float], monotonic: Callable[[], float],
                 hooks: StateListener | None = None) -> None:
        self.store = store
        self.index = index
        self.publisher = publisher
        self._config = config
        self.make_worker = make_worker
        self.clock = clock
        self.monotonic = monotonic
        self.hooks = hooks
        self.slots: dict[str, Slot] = {}
        #: Messages waiting in each job's inbox (kept here so no timer or rule runs SQL); changed with the
        #: store's rows by the inbox methods below (and recounted by recovery and Resync).
        self.inbox: collections.Counter[str] = collections.Counter()
        self.queue = RunQueue(self)
        #: Which job each pending approval is of, and how recent ones were settled.
        self.approvals = Book()
        self.closing_down = False
        #: Opens (once) the socket a host's forward targets and gives its path (the daemon's server
        #: sets it: roost/hosts/placement.py); None where nothing serves hosts.
        self.host_socket: Callable[[str], Path] | None = None
        self.runs = itertools.count(1)
        self.fan_out = asyncio.Semaphore(FAN_OUT)
        self._mailboxes: dict[str, collections.deque[Message]] = {}
        self._ready: collections.deque[str] = collections.deque()
        self._draining = False
        self._scheduled = False
        #: Answers waiting for the commit of the batch that decided them.
        self._held: list[tuple[asyncio.Future[Any], bool, Any]] = []
        #: The batch being applied (each message with its job), and how much of it is committed.
        self._done: list[tuple[Job | None, Message]] = []
        self._committed = 0
        self._due: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Jobs whose last change could not be committed, with why.
        self.unsaved: dict[str, str] = {}
        self._retry: asyncio.TimerHandle | None = None
        self._retry_delay = RETRY_FIRST

    @property
    def config(self) -> Config:
        return self._config()

    # -- mailboxes --------------------------------------------------------------------------------
    def post(self, job_id: str, message: Message) -> None:
        """Queue a message for a job; it is applied after everything posted before it."""
        box = self._mailboxes.get(job_id)
        if box is None:
            box = self._mailboxes[job_id] = collections.deque()
            self._ready.append(job_id)
        box.append(message)
        self._schedule()

    def _schedule(self) -> None:
        if not self._draining and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        """Apply what the mailboxes hold, up to BATCH messages in one transaction (each in a
        savepoint of its own, so one that fails undoes only itself), then release the answers:
        a sender hears of a change only once it is committed."""
        self._scheduled = False
        self._draining = True
        self._done = []
        self._committed = 0
        try:
            with self.store.transaction():
                while self._ready and len(self._done) < BATCH:
                    job_id = self._ready.popleft()
                    box = self._mailboxes.pop(job_id, None)
                    job = self.index.get(job_id)
                    while box:
                        message = box.popleft()
                        self._done.append((job, message))
                        if job is None:
                            message.refuse_unknown(job_id)
                        else:
                            self._apply(job, message)
                    if job is not None:
                        self._arm(job)
        except (sqlite3.Error, OSError) as exc:  # the commit failed: nothing since the last one was kept
            self._lose(self._done[self._committed:], exc)
        finally:
            self._draining = False
        self._release([m for _, m in self._done])
        self._done = []
        if self._ready:
            self._schedule()

    def commit_now(self) -> None:
        """Commit what the batch wrote so far, so that an effect that follows (a prompt handed to
        a worker) is never ahead of the store. Raises the store's error when the commit fails:
        then every message of the batch since the last commit is answered with it, and its job
        saved again once the store takes writes."""
        if not self._draining:
            return
        try:
            self.store.commit_point()
        except (sqlite3.Error, OSError) as exc:
            self._lose(self._done[self._committed:], exc)
            self._committed = len(self._done)
            raise
        self._committed = len(self._done)
        self._release([m for _, m in self._done[:self._committed]])

    def _lose(self, lost: list[tuple[Job | None, Message]], exc: BaseException) -> None:
        refusal = ProtocolError(ErrorCode.STORE, describe_failure(exc, self.store.path))
        for job, message in lost:
            message.outcome = (False, refusal)
            if job is not None:
                self._unsaved(job, exc, None)
        self._held = [(fut, False, refusal) for fut, _, _ in self._held]

    def _apply(self, job: Job, message: Message) -> None:
        from roost.daemon.transitions import BY_MESSAGE

        try:
            with self.store.savepoint():
                BY_MESSAGE[type(message)](self, job, message)
        except ProtocolError as exc:  # a refusal, for the sender
            message.fail(exc)
        except (sqlite3.Error, OSError) as exc:  # the store took no writes (a full disk)
            self._unsaved(job, exc, message)
        except Exception as exc:  # a handler bug must not take the daemon down
            log.exception("job %s: %s failed", job.id, type(message).__name__)
            message.fail(exc)

    # -- answers, released after the commit -----------------------------------------------------------
    def settle(self, fut: asyncio.Future[Any] | None, value: Any = None, error: BaseException | None = None) -> None:
        """Answer a waiting sender (a resume, a close, a prompt's fate) once this change is committed."""
        if fut is not None:
            self._held.append((fut, error is None, value if error is None else error))
            if not self._draining:
                self._release([])

    def answer_turn(self, turn: Turn, value: dict[str, Any]) -> None:
        """Tell the sender of a turn's message (once) what became of it."""
        self.settle(turn.reply, value)
        turn.reply = None

    def _release(self, done: list[Message]) -> None:
        held, self._held = self._held, []
        answers = [(m.reply, *m.outcome) for m in done if m.reply is not None and m.outcome is not None]
        for fut, ok, value in [*answers, *held]:
            if fut is not None and not fut.done():
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

    # -- a store that takes no writes ------------------------------------------------------------------
    def _unsaved(self, job: Job, exc: BaseException, message: Message | None) -> None:
        """A change could not be committed: the sender hears why, and the job is saved again
        (``Resync``) once the store takes writes, so no record stays claiming what is not true."""
        reason = describe_failure(exc, self.store.path)
        if self.unsaved.get(job.id) != reason:
            log.error("job %s: a change was not saved: %s", job.id, reason)
        if message is not None:
            message.fail(ProtocolError(ErrorCode.STORE, reason))
        self.unsaved[job.id] = reason
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(self._retry_delay, self.retry_unsaved)

    def retry_unsaved(self) -> None:
        """Try again to save the jobs whose change the store refused (the retry timer calls it)."""
        self._retry = None
        for job_id, reason in list(self.unsaved.items()):
            self.post(job_id, Resync(reason))
        if self.unsaved:  # still failing: wait longer before the next try
            self._retry_delay = min(self._retry_delay * 2, RETRY_MAX)
            if self._retry is None:
                self._retry = asyncio.get_running_loop().call_later(self._retry_delay, self.retry_unsaved)
        else:
            self._retry_delay = RETRY_FIRST

    # -- effects ------------------------------------------------------------------------------------
    def spawn_task(self, coro: Coroutine[Any, Any, Any], bounded: bool = False) -> None:
        """Run an effect in the background, kept (asyncio holds tasks weakly) and logged if it fails."""
        task = asyncio.get_running_loop().create_task(self._bounded(coro) if bounded else coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    async def _bounded(self, coro: Coroutine[Any, Any, Any]) -> Any:
        async with self.fan_out:
            return await coro

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    def cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for timer in self._timers.values():
            timer.cancel()
        if self._retry is not None:
            self._retry.cancel()
        self._timers.clear()

    # -- writing records (one transaction per message; pushes go out after the commit) --------------
    def timeline(self, job: Job, kind: str, **data: Any) -> dict[str, Any]:
        text = data.get("text")
        if isinstance(text, str) and len(text) > ENTRY_MAX:
            data["text"] = text[:ENTRY_MAX]
            data["cut"] = len(text) - ENTRY_MAX  # says how much of it was not kept
        entry = self.store.add_timeline(job.id, kind, data, self.clock())
        self.store.after_commit(lambda: self.publisher.timeline(entry))
        return entry

    # -- a job's inbox: the store's rows and the engine's count change in one place ---------------
    def add_message(self, job_id: str, text: str) -> None:
        self.store.add_message(job_id, text, self.clock())
        self.inbox[job_id] += 1

    def take_message(self, job_id: str, msg_id: int) -> None:
        """The message was handed to the worker."""
        self.store.mark_message(msg_id, self.clock())
        self.inbox[job_id] -= 1

    def put_back_message(self, job_id: str, msg_id: int) -> None:
        """The worker did not take it: it waits again, first."""
        self.store.undeliver_message(msg_id)
        self.inbox[job_id] += 1

    def drop_messages(self, job_id: str) -> None:
        """A stopped or archived job takes none of what waits for it."""
        self.store.drop_messages(job_id, self.clock())
        self.inbox.pop(job_id, None)

    def save(self, job: Job) -> None:
        job.updated_at = self.clock()
        self.store.save_job(job)
        self.changed(self.index.update(job))

    def changed(self, ids: Iterable[str]) -> None:
        """Rows to push once the current transaction commits (the publisher coalesces them)."""
        ids = set(ids)
        self.store.after_commit(lambda: self.publisher.rows_changed(ids))

    def set_state(self, job: Job, state: State, kind: str, **data: Any) -> None:
        """Change a job's state for a ``kind`` of reason the table allows (roost/rules/state_table.py:
        an illegal change raises), with a timeline entry; the hooks hear of it once it is committed. A
        job with an approval pending stays ``waiting``: the state asked for is where it goes once none is."""
        if job.approvals and state not in (State.WAITING, State.STOPPED, State.FAILED):
            job.approval_back = state.value  # waiting while an approval is pending; this is what comes after
            state, kind = State.WAITING, "approval"
        if job.state == state:
            return
        old = job.state
        check_transition(job.id, old, state, kind)
        job.state = state
        job.state_since = self.clock()
        job.reason = str(data.get("reason") or f"by {data.get('by', 'its owner')}") if state in REASONED_STATES else ""
        job.unseen = state in UNSEEN_STATES and not self.index.attached(job.id)  # attach is a person's
        self.timeline(job, "state", state=state.value, **data)
        if self.hooks is not None:
            hooks = self.hooks
            self.store.after_commit(lambda: hooks.job_changed(self.index.row(job.id, full=True), old.value,
                                                              state.value))

    def kids_changed(self, job: Job) -> None:
        """Whether the job's worker is up or it is open changed: its children's ``parent_open``
        did, and so may their time rules (a kept child's owner)."""
        kids = self.index.kids(job.id)
        self.changed(k.id for k in kids)
        for kid in kids:
            if kid.id in self.slots:
                self.post(kid.id, Due())

    # -- small shared reads ---------------------------------------------------------------------------
    def current(self, job: Job, msg: WorkerMessage) -> Slot | None:
        """The job's slot if the message comes from its present worker (a late word from an old
        worker is ignored)."""
        slot = self.slots.get(job.id)
        return slot if slot is not None and slot.worker is msg.worker else None

    def last_error(self, job: Job) -> str:
        entry = self.store.last_entry(job.id, "error")
        return str(entry.get("message", "failed")) if entry else "failed"

    def recheck_parent(self, job: Job) -> None:
        """A child's turn or worker ended: its parent's close rules read its children."""
        if job.parent and job.parent in self.slots:
            self.post(job.parent, Due())

    # -- what the rules read -------------------------------------------------------------------------
    def facts(self, job: Job) -> WorkerFacts:
        slot = self.slots.get(job.id)
        parent = self.slots.get(job.parent) if job.parent else None
        if slot is None:
            return WorkerFacts(attached=self.index.attached(job.id), queued=self.inbox[job.id],
                               closed_for_room=job.id in self.queue.closed_for_room)
        return WorkerFacts(
            up=True, in_turn=slot.turn is not None, busy=slot.phase is not Phase.READY,
            attached=self.index.attached(job.id), queued=self.inbox[job.id], idle_since=slot.idle_since,
            last_report_at=slot.last_report_at, done_at=slot.done_at,
            owner_up=parent is not None and parent.phase is not Phase.CLOSING, held_since=slot.held_since,
            subagents_running=job.provider_running, subagent_word_at=slot.subagent_word_at,
            approvals_asked=tuple(asked for _, asked in slot.approvals.values()))

    # -- timers ------------------------------------------------------------------------------------------
    def _arm(self, job: Job) -> None:
        """One timer per job with a worker, for the next moment a time rule may act on it."""
        old = self._timers.pop(job.id, None)
        if old is not None:
            old.cancel()
        self._due.pop(job.id, None)
        if job.id not in self.slots or self.closing_down:
            return
        due = next_due(job, self.facts(job), self.index.kids(job.id), self.config)
        if due is None:
            return
        self._due[job.id] = due
        delay = max(0.0, due - self.monotonic())
        self._timers[job.id] = asyncio.get_running_loop().call_later(delay, self.post, job.id, Due())

    def fire_due(self) -> None:
        """Post ``Due`` to every job whose deadline has passed on the engine's clock (what the
        timers do; tests with a fake clock call it after moving the clock)."""
        now = self.monotonic()
        for job_id in [j for j, due in self._due.items() if due <= now]:
            self.post(job_id, Due())

    def next_deadline(self, job_id: str) -> float | None:
        return self._due.get(job_id)

    def pump(self) -> None:
        """Let go what may start now (roost/daemon/run_queue.py): after a slot frees, a spawn, a reload."""
        self.queue.pump()
