"""What one message may change in memory, kept so that a change the store does not commit is
undone: a job's whole live value — its record, its slot and turn, its inbox count, its place in
the run queue, its pending approvals, its subagents' words — is copied before its handler runs,
and put back if the message's savepoint or the batch's commit fails. Memory then equals the store
again, so nothing has to resynchronise it afterwards.

A handler that changes memory outside its own job's value (moving a subtree) says how to undo it
with ``undo``; everything the engine does to the world (tasks, posts, the pump) waits until the
batch is committed (roost/daemon/engine/core.py), so there is nothing else to take back.
"""

from __future__ import annotations

import collections
import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

from roost.daemon.engine.book import Book
from roost.daemon.engine.run_queue import RunQueue
from roost.daemon.engine.slot import Slot
from roost.daemon.storage.index import JobIndex
from roost.models import JOB_FIELDS, Job

_READ = operator.attrgetter(*JOB_FIELDS)
#: The record's lists and dicts, copied one level (records replace theirs whole); the driver profile,
#: shared by records and never changed, is kept as it is.
_CONTAINERS = tuple(i for i, f in enumerate(dataclasses.fields(Job))
                    if f.default_factory in (list, dict) and f.name != "driver_opts")


@dataclass
class Before:
    """One job's live value as it was before a message: enough to put every part of it back."""

    job: Job
    #: The record's fields, in ``JOB_FIELDS`` order.
    fields: list[Any]
    slot: Any
    slot_fields: dict[str, Any] | None
    inbox: int
    releasing: tuple[bool, bool]
    closed_for_room: bool
    evicting: frozenset[str]
    queue_lengths: tuple[int, int, dict[str, int]]
    approvals: dict[str, str]
    provider: dict[str, bool] | None
    #: The connections that had it open.
    holders: frozenset[int]
    #: Whether the index had the record (a spawn's has not: undone, it goes).
    known: bool
    #: Undo steps the handler added (last first when undone).
    extra: list[Callable[[], None]] = field(default_factory=list)


class Journal:
    """The before-images of the messages applied since the last commit, in order."""

    def __init__(self, index: JobIndex, slots: dict[str, Slot], inbox: collections.Counter[str], queue: RunQueue,
                 book: Book) -> None:
        self.index, self.slots, self.inbox, self.queue, self.book = index, slots, inbox, queue, book
        self.kept: list[Before] = []

    def begin(self, job: Job) -> int:
        """Copy the job's live value before its next message; returns the mark to undo to."""
        slot = self.slots.get(job.id)
        queue = self.queue
        self.kept.append(Before(
            job=job, fields=_record(job),
            slot=slot, slot_fields=_slot_copy(slot) if slot is not None else None,
            inbox=self.inbox.get(job.id, 0),
            releasing=(job.id in queue.releasing, queue.releasing.get(job.id, False)),
            closed_for_room=job.id in queue.closed_for_room, evicting=frozenset(queue.evicting),
            queue_lengths=(len(queue.spawns), len(queue.live), {h: len(q) for h, q in queue.hosts.items()}),
            approvals={aid: j for aid, j in self.book.jobs.items() if j == job.id},
            provider=dict(p) if (p := self.index.provider_words(job.id)) is not None else None,
            holders=self.index.holders(job.id), known=job.id in self.index.jobs))
        return len(self.kept) - 1

    def undo(self, step: Callable[[], None]) -> None:
        """How to take back a change to memory outside the job's own value (the current message's)."""
        if self.kept:
            self.kept[-1].extra.append(step)

    def roll_back(self, mark: int = 0) -> set[str]:
        """Put back every job's value as it was at ``mark``, newest change first; returns the jobs."""
        jobs: set[str] = set()
        while len(self.kept) > mark:
            before = self.kept.pop()
            self._put_back(before)
            jobs.add(before.job.id)
        return jobs

    def forget(self) -> None:
        """The batch is committed: nothing of it is to be undone any more."""
        self.kept.clear()

    def _put_back(self, before: Before) -> None:
        job, queue, index = before.job, self.queue, self.index
        for step in reversed(before.extra):
            step()
        for name, value in zip(JOB_FIELDS, before.fields):
            setattr(job, name, value)
        if before.known:
            index.update(job)  # its ancestors' counts follow the record back
        elif job.id in index.jobs:
            index.remove(job)  # a spawn the store did not keep: the job does not exist
        index.set_provider_words(job.id, before.provider)
        index.set_holders(job.id, before.holders)
        if before.slot is None:
            self.slots.pop(job.id, None)
        else:
            assert before.slot_fields is not None
            before.slot.__dict__.update(before.slot_fields)
            self.slots[job.id] = before.slot
        if before.inbox:
            self.inbox[job.id] = before.inbox
        else:
            self.inbox.pop(job.id, None)
        present, place = before.releasing
        if present:
            queue.releasing[job.id] = place
        else:
            queue.releasing.pop(job.id, None)
        (queue.closed_for_room.add if before.closed_for_room else queue.closed_for_room.discard)(job.id)
        queue.evicting.clear()
        queue.evicting.update(before.evicting)
        spawns, live, hosts = before.queue_lengths
        _cut(queue.spawns, spawns)
        _cut(queue.live, live)
        for host in list(queue.hosts):
            _cut(queue.hosts[host], hosts.get(host, 0))
            if host not in hosts:
                del queue.hosts[host]
        for aid in [a for a, j in self.book.jobs.items() if j == job.id and a not in before.approvals]:
            del self.book.jobs[aid]
        for aid in before.approvals:
            self.book.settled.pop(aid, None)
        self.book.jobs.update(before.approvals)


def _record(job: Job) -> list[Any]:
    """A record's fields as kept (one C call for all of them: this runs before every message)."""
    values = list(_READ(job))
    for i in _CONTAINERS:
        values[i] = values[i].copy()
    return values


def _slot_copy(slot: Slot) -> dict[str, Any]:
    """A slot's fields, its turn and lists copied (the worker, the futures and the token are shared)."""
    fields = slot.__dict__.copy()
    turn = slot.turn
    if turn is not None:
        kept = object.__new__(type(turn))
        kept.__dict__.update(turn.__dict__)
        fields["turn"] = kept
    fields["resume_replies"] = fields["resume_replies"].copy()
    fields["close_replies"] = fields["close_replies"].copy()
    fields["approvals"] = fields["approvals"].copy()
    fields["whole"] = fields["whole"].copy()
    return fields


def _cut(queue: Any, length: int) -> None:
    """Take off what was appended after ``length`` (a handler only appends; pops wait for the commit)."""
    while len(queue) > length:
        queue.pop()
