"""The engine: one ordered mailbox per job, one transition function, deadlines instead of polls.

Every command about a job (send, stop, close, pin, archive, …) and every event of its worker is a
message posted to that job's mailbox; ``apply`` hands each, in order, to the one handler for its
type (``transitions.BY_MESSAGE``). Handlers are synchronous: they change the record, commit, and start
effects (start a process, send a prompt, abort) as tasks whose outcome comes back as another
message. So nothing mutates a job between two messages, and every race — the reaper against a
message, a stop against a new turn, a report while a turn ends — is a question of order.

Time rules are deadlines: after each message the engine asks the pure rules when the job is next
due (``rules.lifecycle.next_due``) and arms one timer for it on the monotonic clock.

One idea at about 440 lines: the drain — mailboxes, each message's savepoint, the batch's commit,
what a refused commit puts back, and the effects released after it. The handlers (transitions),
the journal, the records API and the deadlines are modules of their own.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Coroutine

from roost.config import Config
from roost.daemon.engine.barrier import Barriers
from roost.daemon.engine.book import Book
from roost.daemon.storage.index import JobIndex
from roost.daemon.engine.journal import Journal
from roost.daemon.engine.messages import Due, Message, Spawn, WorkerMessage
from roost.daemon.engine.records import Records, StateListener
from roost.daemon.engine.run_queue import RunQueue
from roost.daemon.engine.transitions import BY_MESSAGE
from roost.daemon.engine.slot import Hold, Slot, Turn, WorkerHandle
from roost.daemon.storage.store import Store, describe_failure
from roost.daemon.processes.launch import AdoptFactory, WorkerFactory
from roost.models import Job
from roost.protocol import ErrorCode, ProtocolError
from roost.rules.lifecycle import next_due

if TYPE_CHECKING:
    from roost.daemon.server.publisher import Publisher

log = logging.getLogger("roost.daemon")

#: How many effects of one tree operation (aborts, closes) run at once.
FAN_OUT = 32
#: The most messages one transaction applies before the loop serves others again.
BATCH = 512
#: How soon, and at most how long apart, a change the store refused is tried again.
RETRY_FIRST = 0.5
RETRY_MAX = 30.0


async def _nothing_to_prepare(job_id: str, worker: WorkerHandle) -> str | None:
    return None


class Engine(Records):
    """The state every handler works on, and the machinery that orders them."""

    def __init__(self, store: Store, index: JobIndex, publisher: "Publisher", config: Callable[[], Config],
                 make_worker: WorkerFactory, clock: Callable[[], float], monotonic: Callable[[], float],
                 hooks: StateListener | None = None) -> None:
        self.store = store
        self.index = index
        self.publisher = publisher
        self._config = config
        self.make_worker = make_worker
        #: Takes over a worker a past daemon left running (the supervisor gives the real one).
        self.adopt_worker: AdoptFactory | None = None
        self.clock = clock
        self.monotonic = monotonic
        self.hooks = hooks
        self.slots: dict[str, Slot] = {}
        #: Messages waiting in each job's inbox (kept here so no timer or rule runs SQL); changed with the
        #: store's rows by the inbox methods below (and recounted by recovery).
        self.inbox: collections.Counter[str] = collections.Counter()
        self.queue = RunQueue(self)
        #: Which job each pending approval is of, and how recent ones were settled.
        self.approvals = Book()
        self.closing_down = False
        #: Archived worktrees waiting for their jobs' workers to exit before they are settled
        #: (path -> owner; roost/daemon/git/worktrees.py).
        self.teardowns: dict[str, str] = {}
        self.accounts: dict[str, Hold] = {}
        #: When each tree's recent spawns were (root -> monotonic times, oldest first; roost/rules/quotas.py).
        self.spawn_times: dict[str, collections.deque[float]] = {}
        #: Opens (once) the socket a host's forward targets and gives its path (the daemon's server
        #: sets it: roost/hosts/placement.py); None where nothing serves hosts.
        self.host_socket: Callable[[str], Path] | None = None
        #: Readies a job's worker on its host (the supervisor gives roost/hosts/placement.py's); none here.
        self.prepare_host: Callable[[str, WorkerHandle], Awaitable[str | None]] = _nothing_to_prepare
        self.runs = itertools.count(1)
        self.fan_out = asyncio.Semaphore(FAN_OUT)
        self._mailboxes: dict[str, collections.deque[Message]] = {}
        self._ready: collections.deque[str] = collections.deque()
        self._draining = False
        self._saved: dict[str, Job] = {}
        self._scheduled = False
        #: Answers waiting for the commit of the batch that decided them, by the message that did.
        self._held: list[tuple[int | None, asyncio.Future[Any], bool, Any]] = []
        #: What handlers asked the world for (run, or discard if the change is not kept), by message.
        self._effects: list[tuple[int, Callable[[], None], Callable[[], None] | None]] = []
        #: The message being applied (its place in the batch), None between messages.
        self._applying: int | None = None
        self._pump_wanted = False
        #: Set once no worker is left, for a shutdown waiting on it (``workers_gone``).
        self._gone: asyncio.Future[None] | None = None
        #: Each job's live value before the messages since the last commit (put back if it fails).
        self.journal = Journal(self.index, self.slots, self.inbox, self.queue, self.approvals)
        self._due: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Jobs whose worker's word (or the daemon's) the store refused, with why: it waits, first in
        #: their mailbox, until the store takes writes (``retry_stalled``).
        self.stalled: dict[str, str] = {}
        self._retry: asyncio.TimerHandle | None = None
        self._retry_delay = RETRY_FIRST
        #: What ``idle`` waits for (roost/daemon/engine/barrier.py).
        self.barriers = Barriers()

    @property
    def config(self) -> Config:
        return self._config()

    # -- mailboxes --------------------------------------------------------------------------------
    def post(self, job_id: str, message: Message) -> None:
        """Queue a message for a job; it is applied after everything posted before it. Posted by a
        handler, it is an effect: it goes once the change that posted it is committed."""
        if self._applying is not None:
            self._effects.append((self._applying, lambda: self.post(job_id, message), None))
            return
        box = self._mailboxes.get(job_id)
        if box is None:
            box = self._mailboxes[job_id] = collections.deque()
            if job_id not in self.stalled:
                self._ready.append(job_id)
        box.append(message)
        self.barriers.posted(message)
        if job_id in self.stalled and not isinstance(message, WorkerMessage) and message.reply is not None:
            self._ready.append(job_id)  # its sender is told at once why it waits for nothing
        self._schedule()

    def _schedule(self) -> None:
        if not self._draining and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        """Apply what the mailboxes hold, up to BATCH messages in one transaction (each in a
        savepoint of its own, so one that fails undoes only itself, in the store and in memory),
        then commit, and only then run the effects and release the answers: a sender hears of a
        change, and a worker is asked anything, only once the change is committed. A failed commit
        puts memory back as it was before the batch (``Journal``)."""
        self._scheduled = False
        self._draining = True
        done: list[tuple[str, Message]] = []
        touched: set[str] = set()
        failure: BaseException | None = None
        try:
            with self.store.transaction():
                while self._ready and len(done) < BATCH:
                    job_id = self._ready.popleft()
                    touched.add(job_id)
                    self._drain_box(job_id, done)
                self.write_saved()
        except (sqlite3.Error, OSError) as exc:  # the commit failed: nothing of the batch was kept
            failure = exc
        finally:
            self._draining = False
            self._saved = {}
        effects, self._effects = self._effects, []
        if failure is not None:
            self._refused_batch(done, failure)
            for _, _, discard in reversed(effects):
                if discard is not None:
                    discard()
            effects = []
        else:
            self.journal.forget()
            if not self.stalled:
                self._retry_delay = RETRY_FIRST
        self._release([m for _, m in done])
        passed = self.barriers.committed(m for _, m in done)  # what their effects post, they wait for too
        for _, run, _ in effects:
            run()
        for job_id in touched:
            job = self.index.get(job_id)
            if job is not None:
                self._arm(job)
        if self._gone is not None and not self.slots and not self._gone.done():
            self._gone.set_result(None)
        if self._pump_wanted:
            self._pump_wanted = False
            self.pump()
        self.barriers.effects_ran(passed)
        if self._ready:
            self._schedule()

    def _drain_box(self, job_id: str, done: list[tuple[str, Message]]) -> None:
        """Apply one job's mailbox in order. A job whose worker's word the store refused keeps that
        word, and what came after it, waiting; a sender behind it hears why at once."""
        box = self._mailboxes.pop(job_id, None)
        job = self.index.get(job_id)
        if job is None and box and isinstance(box[0], Spawn):
            job = box[0].job  # a new job: its Spawn makes the record the rest of its mailbox works on
        kept: collections.deque[Message] = collections.deque()
        while box:
            message = box.popleft()
            if job is None:
                message.refuse_unknown(job_id)
            elif job_id in self.stalled:
                if self._waits(message):
                    kept.append(message)
                    continue
                message.fail(ProtocolError(ErrorCode.STORE, self.stalled[job_id]))
            elif not self._apply(job, message, len(done)):
                kept.append(message)
                continue
            done.append((job_id, message))
            if job is not None and job_id not in self.index.jobs:
                job = None  # its spawn was refused: there is no such job
        if kept:
            self._mailboxes[job_id] = kept

    def _apply(self, job: Job, message: Message, at: int) -> bool:
        """One message in its savepoint; False when the store took no writes and it waits to be
        applied again (a worker's word, or the daemon's own: nobody may lose it)."""
        mark = self.journal.begin(job)
        self._applying = at
        try:
            with self.store.savepoint():
                handler = BY_MESSAGE.get(type(message))
                if handler is None:  # an operation module's message carries its transition (roost/daemon/ops/)
                    message.apply(self, job)
                else:
                    handler(self, job, message)
            return True
        except ProtocolError as exc:  # a refusal, for the sender: nothing of it happened
            self._undo(mark, at)
            message.fail(exc)
        except (sqlite3.Error, OSError) as exc:  # the store took no writes (a full disk)
            self._undo(mark, at)
            return not self._refused(job.id, message, exc)
        except Exception as exc:  # a handler bug must not take the daemon down
            log.exception("job %s: %s failed", job.id, type(message).__name__)
            self._undo(mark, at)
            message.fail(exc)
        finally:
            self._applying = None
        return True

    def _undo(self, mark: int, at: int) -> None:
        """Take back one message: its memory, its effects and the answers it gave."""
        self.journal.roll_back(mark)
        for _, _, discard in reversed([e for e in self._effects if e[0] == at]):
            if discard is not None:
                discard()
        self._effects = [e for e in self._effects if e[0] != at]
        self._held = [h for h in self._held if h[0] != at]

    # -- a store that takes no writes ------------------------------------------------------------------
    @staticmethod
    def _waits(message: Message) -> bool:
        """Whether a message the store refused waits to be applied again: what a worker did and what
        the daemon posted itself must not be lost; a sender's command is refused instead."""
        return isinstance(message, WorkerMessage) or message.reply is None

    def _refused(self, job_id: str, message: Message, exc: BaseException) -> bool:
        """The store refused a message's change: its sender hears why, or it waits at the head of
        its mailbox for the store to take writes (True)."""
        reason = describe_failure(exc, self.store.path)
        if not self._waits(message):
            message.fail(ProtocolError(ErrorCode.STORE, reason))
            return False
        if self.stalled.get(job_id) != reason:
            log.error("job %s: %s was not saved: %s; applied again once the store takes writes",
                      job_id, type(message).__name__, reason)
        self.stalled[job_id] = reason
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(self._retry_delay, self.retry_stalled)
            self._retry_delay = min(self._retry_delay * 2, RETRY_MAX)
        return True

    def _refused_batch(self, done: list[tuple[str, Message]], exc: BaseException) -> None:
        """The batch's commit failed: memory goes back to before it; each command is refused with the
        store's reason, and every other message waits again, first in its mailbox, in order."""
        self.journal.roll_back()
        self._held = []
        again: dict[str, list[Message]] = {}
        for job_id, message in done:
            if message.outcome is not None and not message.outcome[0] and message.reply is not None:
                continue  # refused already: its sender hears that
            message.outcome = None
            if self._refused(job_id, message, exc):
                again.setdefault(job_id, []).append(message)
        for job_id, messages in again.items():
            self._mailboxes[job_id] = collections.deque([*messages, *self._mailboxes.get(job_id, ())])
        waiting = {id(m) for messages in again.values() for m in messages}  # by identity: equal Dues are two
        done[:] = [(j, m) for j, m in done if id(m) not in waiting]

    def retry_stalled(self) -> None:
        """Apply again what waits for the store to take writes (the retry timer calls it, later each
        time it still fails, up to RETRY_MAX)."""
        if self._retry is not None:
            self._retry.cancel()
        self._retry = None
        for job_id in list(self.stalled):
            del self.stalled[job_id]
            if job_id in self._mailboxes and job_id not in self._ready:
                self._ready.append(job_id)
        if self._ready:
            self._schedule()

    async def idle(self) -> None:
        """Wait until every message posted before this call is applied and committed, with what
        those post in turn (roost/daemon/engine/barrier.py): the ``sync`` operation's barrier."""
        await self.barriers.wait([message for box in self._mailboxes.values() for message in box])

    async def ask(self, job_id: str, message: Message) -> Any:
        """Post a message to a job's mailbox and wait for its handler's answer (released once the
        change it reports is committed)."""
        message.reply = asyncio.get_running_loop().create_future()
        self.post(job_id, message)
        return await message.reply

    async def workers_gone(self) -> None:
        """Wait (no polling) until every worker's exit has been applied."""
        if self.slots:
            self._gone = asyncio.get_running_loop().create_future()
            await self._gone

    # -- answers, released after the commit -----------------------------------------------------------
    def settle(self, fut: asyncio.Future[Any] | None, value: Any = None, error: BaseException | None = None) -> None:
        """Answer a waiting sender (a resume, a close, a prompt's fate) once this change is committed."""
        if fut is not None:
            self._held.append((self._applying, fut, error is None, value if error is None else error))
            if not self._draining:
                self._release([])

    def answer_turn(self, turn: Turn, value: dict[str, Any]) -> None:
        """Tell the sender of a turn's message (once) what became of it."""
        self.settle(turn.reply, value)
        turn.reply = None

    def _release(self, done: list[Message]) -> None:
        held, self._held = self._held, []
        answers = [(m.reply, *m.outcome) for m in done if m.reply is not None and m.outcome is not None]
        for fut, ok, value in [*answers, *((f, ok, v) for _, f, ok, v in held)]:
            if fut is not None and not fut.done():
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

    # -- effects ------------------------------------------------------------------------------------
    def spawn_task(self, coro: Coroutine[Any, Any, Any], bounded: bool = False) -> None:
        """Run an effect in the background, kept (asyncio holds tasks weakly) and logged if it fails;
        asked for by a handler, it starts once the change is committed (never, if it is not)."""
        if self._applying is not None:
            self._effects.append((self._applying, lambda: self.spawn_task(coro, bounded), coro.close))
            return
        task = asyncio.get_running_loop().create_task(self._bounded(coro) if bounded else coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def effect(self, run: Callable[[], None]) -> None:
        """Do something to the world (kill a worker) once the change that decided it is committed."""
        if self._applying is not None:
            self._effects.append((self._applying, run, None))
        else:
            run()

    def undo(self, back: Callable[[], None]) -> None:
        """Put back memory the journal does not hold (the spend ledger) if the change that changed
        it is not kept; undone last first."""
        if self._applying is not None:
            self._effects.append((self._applying, _kept, back))

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
        """Let go what may start now (roost/daemon/engine/run_queue.py): after a slot frees, a spawn, a
        reload. Asked for by a handler, it runs once the batch is committed."""
        if self._draining:
            self._pump_wanted = True
            return
        try:
            with self.store.transaction():
                self.queue.pump()
        except (sqlite3.Error, OSError) as exc:  # what it noted is lost; the next pump says it again
            log.error("the run queue's notes were not saved: %s", describe_failure(exc, self.store.path))


def _kept() -> None:
    """An undo's run once its change is kept: nothing to do."""
