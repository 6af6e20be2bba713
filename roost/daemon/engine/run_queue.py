"""The run queue: which job may start a worker now, under the global ``max_running_jobs`` and
under each host's own.

A spawn is ``queued`` in one first-come queue until the global cap has room (resumes are not held
by it: lifecycle.md). A job whose host has as many live workers as its ``max_running_jobs`` waits in
that host's queue instead — a spawn stays ``queued``, a resume keeps its state and its messages stay
in the inbox — holding no place under the global cap, so a full build box never stops local work or
other hosts. When a worker on the host ends, the host's oldest waiting job goes ahead (a spawn also
needs global room). Nothing here awaits and nothing touches a record: it decides, and posts
``Start`` (a spawn) or ``Resume`` to the job's mailbox.

Under all of them, ``max_live_workers`` bounds every live worker, idle ones included. A start
that would pass it waits in the live queue (a spawn stays ``queued``; its timeline says what for),
and the least recently used idle workers nothing holds are closed (``Evict``) until every waiting
start has a place (roost/rules/live_workers.py decides which); when a worker exits, the oldest
waiting start goes. Spawns do not pass those waiting starts.
"""

from __future__ import annotations

import collections
import enum
from typing import Any, Protocol

from roost.config import Config, ConfigError
from roost.daemon.engine.messages import Evict, Message, Resume, Start
from roost.daemon.engine.slot import Phase, Slot
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.store import Store
from roost.models import TURN_STATES, Job, State
from roost.rules.counts import slot_wait
from roost.rules.lifecycle import WorkerFacts
from roost.rules.live_workers import Idle, closable, holds_place, places_short, to_close



class QueueHost(Protocol):
    """What the run queue reads of the engine, and how it asks: it posts, and notes why a job waits."""

    store: Store
    index: JobIndex
    slots: dict[str, Slot]
    closing_down: bool

    @property
    def config(self) -> Config: ...

    def post(self, job_id: str, message: Message) -> None: ...
    def timeline(self, job: Job, kind: str, **data: Any) -> dict[str, Any]: ...
    def save(self, job: Job) -> None: ...
    def facts(self, job: Job) -> WorkerFacts: ...


class Placed(str, enum.Enum):
    """What asking to start a job's worker came to."""

    STARTED = "started"
    #: Its host is full: the job waits in the host's queue, with no worker and no slot.
    WAITING = "waiting"
    FAILED = "failed"


class RunQueue:
    def __init__(self, eng: QueueHost) -> None:
        self.eng = eng
        #: Spawns waiting for room under the global cap, oldest first.
        self.spawns: collections.deque[str] = collections.deque()
        #: Jobs waiting for room on their host, oldest first, per host.
        self.hosts: dict[str, collections.deque[str]] = {}
        #: Jobs let go whose Start or Resume is still in their mailbox: they hold their place under
        #: the global cap, and (True) one on their host if it had room when they were let go.
        self.releasing: dict[str, bool] = {}
        #: Starts waiting for a place under ``max_live_workers``, oldest first.
        self.live: collections.deque[str] = collections.deque()
        #: Idle workers told to close for room (``Evict`` not yet applied).
        self.evicting: set[str] = set()
        #: Jobs whose worker was closed for room: a report for one wakes it (rules.lifecycle).
        self.closed_for_room: set[str] = set()
        #: Spawns added since the last pump (it says what each still waits for).
        self.fresh: list[str] = []

    # -- the global cap ---------------------------------------------------------------------------
    def running(self) -> int:
        """Jobs holding a place under ``max_running_jobs``: a worker starting or in a turn, and no
        running children (a parent waiting for its subagents has handed its work down; counting
        it could deadlock a small cap)."""
        eng = self.eng
        count = sum(1 for job_id in self.releasing if job_id not in eng.slots and self._spawn(job_id))
        for job_id, slot in eng.slots.items():
            job = eng.index.get(job_id)
            if job is None or job.state not in TURN_STATES:
                continue
            if (slot.phase is Phase.STARTING or slot.turn is not None) and not eng.index.counts(job_id)[1]:
                count += 1
        return count

    def _spawn(self, job_id: str) -> bool:
        job = self.eng.index.get(job_id)
        return job is not None and job.state == State.QUEUED

    def _global_room(self) -> bool:
        cap = self.eng.config.max_running_jobs
        return not cap or self.running() < cap

    # -- the hosts' caps --------------------------------------------------------------------------
    def host_load(self, host: str) -> int:
        """Live workers on ``host`` (a worker being started counts), and jobs let go to start there.
        A parent whose subagents still run does not count, as under the global cap: its children
        run on its host by default, and the parent is kept open while they run, so counting it
        would leave them waiting for good on a host with room for one."""
        eng = self.eng
        on_host = {job_id for job_id in eng.slots if (job := eng.index.get(job_id)) is not None and job.host == host
                   and not eng.index.counts(job_id)[1]}
        on_host.update(j for j, place in self.releasing.items()
                       if place and (job := eng.index.get(j)) is not None and job.host == host)
        return len(on_host)

    def host_room(self, job: Job) -> bool:
        """Whether the job's host (this machine: always) has room for one more worker. A host gone
        from the config has room: the start then fails with why."""
        if not job.host:
            return True
        try:
            cap = self.eng.config.host(job.host).max_running_jobs
        except ConfigError:
            return True
        return not cap or self.host_load(job.host) < cap + self.releasing.get(job.id, False)

    def wait_for_host(self, job: Job) -> None:
        """Put the job in its host's queue (once), with a note on its timeline."""
        waiting = self.hosts.setdefault(job.host, collections.deque())
        self.releasing.pop(job.id, None)
        if job.id in waiting:
            return
        waiting.append(job.id)
        eng = self.eng
        why = f"waiting for room on host {job.host} (max_running_jobs = {eng.config.host(job.host).max_running_jobs})"
        eng.timeline(job, "note", message=why)
        self._say_why(job, why)

    # -- the live-worker cap --------------------------------------------------------------------------
    def live_count(self) -> int:
        """Live workers (every slot: starting, ready or closing) and jobs let go to start one, but
        not one waiting in its turn for children that still run (``holds_place``)."""
        eng = self.eng
        held = sum(1 for job_id, slot in eng.slots.items()
                   if holds_place(slot.turn is not None, eng.index.counts(job_id)[1]))
        return held + sum(1 for j in self.releasing if j not in eng.slots)

    def _live_free(self) -> bool:
        cap = self.eng.config.max_live_workers
        return not cap or self.live_count() < cap

    def live_room(self, job: Job) -> bool:
        """Whether ``job`` may start a worker under ``max_live_workers``: it was let go with a place
        kept for it, or there is one and no start waits before it."""
        if not self.eng.config.max_live_workers or job.id in self.releasing:
            return True
        return not self.live and self._live_free()

    def wait_for_live(self, job: Job) -> None:
        """Put the job in the live queue (once), with a note on its timeline, and make room."""
        self.releasing.pop(job.id, None)
        if job.id not in self.live:
            self.live.append(job.id)
            eng = self.eng
            eng.timeline(job, "note", message=f"waiting for a live-worker place (max_live_workers = "
                                              f"{eng.config.max_live_workers}): an idle worker closes for it, "
                                              "or the next one that ends")
            self._say_why(job, f"waiting for a live-worker place (max_live_workers = {eng.config.max_live_workers})")
        self.make_room()

    def make_room(self) -> None:
        """Close as many least recently used idle workers as the waiting starts need places (and
        as put the live ones back under a lowered cap): an ``Evict`` to each, counted until applied."""
        eng = self.eng
        closing = sum(1 for slot in eng.slots.values() if slot.phase is Phase.CLOSING) + len(self.evicting)
        short = places_short(eng.config.max_live_workers, self.live_count(), closing, len(self.live))
        if not short:
            return
        idle = []
        for job_id, slot in eng.slots.items():
            job = eng.index.get(job_id)
            if (job is not None and job_id not in self.evicting and slot.phase is Phase.READY
                    and closable(job, eng.facts(job))):
                idle.append(Idle(job_id, slot.idle_since or 0.0, eng.index.counts(job_id)[1] > 0))
        for job_id in to_close(idle, short):
            self.evicting.add(job_id)
            eng.post(job_id, Evict())

    def _pump_live(self) -> None:
        eng = self.eng
        while self.live:
            job = eng.index.get(self.live[0])
            if job is None or job.archived_at is not None or job.state == State.STOPPED or job.id in eng.slots:
                self.live.popleft()  # nothing to start any more
                continue
            if not self._live_free() or (job.state == State.QUEUED and not self._global_room()):
                return
            self.live.popleft()
            self.releasing[job.id] = self.host_room(job)
            eng.post(job.id, Start() if job.state == State.QUEUED else Resume())

    # -- saying why --------------------------------------------------------------------------------
    def _say_why(self, job: Job, why: str) -> None:
        """A queued spawn's row says what it waits for: its ``reason`` while queued (the start,
        leaving ``queued``, clears it). A resume waiting for its host keeps its state and says so
        on its timeline only."""
        if job.state == State.QUEUED and job.reason != why:
            job.reason = why
            self.eng.save(job)

    def _explain(self, job_id: str) -> None:
        """After a spawn's pump: a spawn still in the global queue waits for ``max_running_jobs``, or
        behind starts waiting for a live-worker place; its row says which."""
        job = self.eng.index.get(job_id)
        if job is None or job_id not in self.spawns:  # let go already, or its spawn was not kept
            return
        if not self._global_room():
            self._say_why(job, slot_wait(self.running(), self.eng.config.max_running_jobs))
        else:
            self._say_why(job, f"waiting for a live-worker place (max_live_workers = {self.eng.config.max_live_workers})")

    # -- letting jobs go ----------------------------------------------------------------------------
    def add(self, job_id: str) -> None:
        """A new spawn, last in the global queue (the next pump lets it go, or says what it waits for)."""
        self.spawns.append(job_id)
        self.fresh.append(job_id)

    def pump(self) -> None:
        """Let go what may start now: the hosts' waiting jobs first (they are older), then those
        waiting for a live-worker place, then spawns while the global cap has room and a live
        place is free. Called after a slot frees, a spawn, or a config reload."""
        eng = self.eng
        if eng.closing_down:
            return
        for host, waiting in list(self.hosts.items()):
            self._pump_host(waiting)
            if not waiting:
                del self.hosts[host]
        self._pump_live()
        while self.spawns and self._global_room() and not self.live:  # not past a start waiting for a place
            job_id = self.spawns.popleft()
            job = eng.index.get(job_id)
            if job is None or job.archived_at is not None or job.state != State.QUEUED:
                continue
            if not self._live_free():  # the first spawn with no place waits in the live queue, saying so
                self.wait_for_live(job)
                break
            # A place on its host only if it has room now: one that has none waits there once its
            # Start is applied, behind the host's waiting jobs and those let go before it.
            self.releasing[job_id] = self.host_room(job)
            eng.post(job_id, Start())
        self.make_room()  # a reload may have lowered the cap under the live workers
        fresh, self.fresh = self.fresh, []
        for job_id in fresh:
            self._explain(job_id)

    def _pump_host(self, waiting: collections.deque[str]) -> None:
        eng = self.eng
        while waiting:
            job = eng.index.get(waiting[0])
            if job is None or job.archived_at is not None or job.state == State.STOPPED or job.id in eng.slots:
                waiting.popleft()  # nothing to start any more
                continue
            spawn = job.state == State.QUEUED
            if not self.host_room(job) or (spawn and not self._global_room()) or not self.live_room(job):
                return  # first come, first served on each host
            waiting.popleft()
            self.releasing[job.id] = True
            eng.post(job.id, Start() if spawn else Resume())

    def queued_count(self) -> int:
        """Spawns that wait: for the global cap, for their host or for a live-worker place."""
        ids = set(self.spawns).union(self.live, *self.hosts.values())
        return sum(1 for j in ids if (job := self.eng.index.get(j)) is not None and job.state == State.QUEUED)
