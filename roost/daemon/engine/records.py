"""Writing a job's records, the part of the engine every handler calls: timeline entries (cut to
ENTRY_MAX), the inbox's rows and the count kept with them, saving a record, state changes checked
by the table, and the small reads the rules and handlers share. All of it joins the batch's
transaction; pushes and hooks go out only after the commit (``Store.after_commit``)."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from roost.config import Config
from roost.daemon.engine import stall_watch
from roost.daemon.engine.limits import limit_at
from roost.daemon.engine.messages import Due, Message, WorkerMessage
from roost.daemon.engine.run_queue import RunQueue
from roost.daemon.engine.slot import Phase, Slot, live_of
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.output_bytes import OUTPUT_KINDS
from roost.daemon.storage.store import Store
from roost.models import REASONED_STATES, UNSEEN_STATES, Job, State
from roost.protocol import ENTRY_MAX
from roost.rules.lifecycle import WorkerFacts
from roost.rules.state_table import check as check_transition

if TYPE_CHECKING:
    from roost.daemon.server.publisher import Publisher


class StateListener(Protocol):
    """Told of every committed state change (the daemon's hooks)."""

    def job_changed(self, row: dict[str, Any], old: str, new: str) -> None: ...


class Records:
    """The engine's record writing (``Engine`` is one); the state it works on is the engine's."""

    store: Store
    index: JobIndex
    publisher: "Publisher"
    hooks: StateListener | None
    slots: dict[str, Slot]
    inbox: collections.Counter[str]
    queue: RunQueue
    clock: Callable[[], float]
    _config: Callable[[], Config]
    post: Callable[[str, Message], None]
    _draining: bool
    #: Jobs saved by the batch being applied, written once before its commit (``write_saved``).
    _saved: dict[str, Job]

    # -- writing records (one transaction per message; pushes go out after the commit) --------------
    def timeline(self, job: Job, kind: str, **data: Any) -> dict[str, Any]:
        text = data.get("text")
        if isinstance(text, str) and len(text) > ENTRY_MAX:
            data["text"] = text[:ENTRY_MAX]
            data["cut"] = len(text) - ENTRY_MAX  # says how much of it was not kept
        entry = self.store.add_timeline(job.id, kind, data, self.clock())
        self.store.after_commit(lambda: self.publisher.timeline(entry))
        if kind in OUTPUT_KINDS:
            self._bound_output(job)
        return entry

    def _bound_output(self, job: Job) -> None:
        """Past ``max_timeline_bytes`` of output the job's oldest output goes, and a note says so."""
        bound = self._config().max_timeline_bytes
        if not bound or self.store.output.of(job.id) <= bound:
            return
        entries, size = self.store.output.drop_oldest(job.id, bound)
        self.timeline(job, "note", quota=size, message=(
            f"this job's output on its timeline reached its bound of {bound} bytes (max_timeline_bytes): "
            f"its oldest {entries} output entries ({size} bytes) were dropped; the newest output is kept"))

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
        """Inside a batch the record is written once, before its commit (``write_saved``): a job that
        many events change (a burst of output) is not re-encoded and re-written for each of them."""
        job.updated_at = self.clock()
        self.save_quietly(job)
        self.changed(self.index.update(job))

    def save_quietly(self, job: Job) -> None:
        """Write the record with nothing a row shows changed (what its live worker has applied)."""
        if self._draining:
            self._saved[job.id] = job
        else:
            job.live = live_of(self.slots.get(job.id))
            self.store.save_job(job)

    def write_saved(self) -> None:
        """Write the records the batch saved, as memory holds them now: a message whose savepoint
        failed was put back by the journal, so what is written is what the kept messages made. A job
        the index no longer has (a spawn that was undone) is not written. A failure here fails the
        commit, and the journal puts the whole batch back."""
        saved, self._saved = self._saved, {}
        for job_id, job in saved.items():
            if self.index.jobs.facts(job_id) is job:
                job.live = live_of(self.slots.get(job_id))
                self.store.save_job(job)

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
        if state != State.RATE_LIMITED:  # its limit's reset and words are only for that state
            job.limited_until, job.limited_words = None, ""
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
            approvals_asked=tuple(asked for _, asked in slot.approvals.values()), limit_at=limit_at(job, slot),
            stall_due=stall_watch.due(job, slot, self.config, self.monotonic()))
