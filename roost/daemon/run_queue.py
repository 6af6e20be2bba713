"""The run queue: which job may start a worker now, under the global ``max_running_jobs`` and
under each host's own.

A spawn is ``queued`` in one first-come queue until the global cap has room (resumes are not held
by it: lifecycle.md). A job whose host has as many live workers as its ``max_running_jobs`` waits in
that host's queue instead — a spawn stays ``queued``, a resume keeps its state and its messages stay
in the inbox — holding no place under the global cap, so a full build box never stops local work or
other hosts. When a worker on the host ends, the host's oldest waiting job goes ahead (a spawn also
needs global room). Nothing here awaits and nothing touches a record: it decides, and posts
``Start`` (a spawn) or ``Resume`` to the job's mailbox.
"""

from __future__ import annotations

import collections
import enum
from typing import TYPE_CHECKING

from roost.config import ConfigError
from roost.daemon.messages import Resume, Start
from roost.daemon.slot import Phase
from roost.models import TURN_STATES, Job, State

if TYPE_CHECKING:
    from roost.daemon.engine import Engine


class Placed(str, enum.Enum):
    """What asking to start a job's worker came to."""

    STARTED = "started"
    #: Its host is full: the job waits in the host's queue, with no worker and no slot.
    WAITING = "waiting"
    FAILED = "failed"


class RunQueue:
    def __init__(self, eng: "Engine") -> None:
        self.eng = eng
        #: Spawns waiting for room under the global cap, oldest first.
        self.spawns: collections.deque[str] = collections.deque()
        #: Jobs waiting for room on their host, oldest first, per host.
        self.hosts: dict[str, collections.deque[str]] = {}
        #: Jobs let go whose Start or Resume is still in their mailbox: they hold their place under
        #: the global cap, and (True) one on their host if it had room when they were let go.
        self.releasing: dict[str, bool] = {}

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
        with eng.store.transaction():
            eng.timeline(job, "note", message=f"waiting for room on host {job.host} "
                                              f"(max_running_jobs = {eng.config.host(job.host).max_running_jobs})")

    # -- letting jobs go ----------------------------------------------------------------------------
    def add(self, job_id: str) -> None:
        self.spawns.append(job_id)

    def pump(self) -> None:
        """Let go what may start now: the hosts' waiting jobs first (they are older), then spawns
        while the global cap has room. Called after a slot frees, a spawn, or a config reload."""
        eng = self.eng
        if eng.closing_down:
            return
        for host, waiting in list(self.hosts.items()):
            self._pump_host(waiting)
            if not waiting:
                del self.hosts[host]
        while self.spawns and self._global_room():
            job_id = self.spawns.popleft()
            job = eng.index.get(job_id)
            if job is None or job.archived_at is not None or job.state != State.QUEUED:
                continue
            # A place on its host only if it has room now: one that has none waits there once its
            # Start is applied, behind the host's waiting jobs and those let go before it.
            self.releasing[job_id] = self.host_room(job)
            eng.post(job_id, Start())

    def _pump_host(self, waiting: collections.deque[str]) -> None:
        eng = self.eng
        while waiting:
            job = eng.index.get(waiting[0])
            if job is None or job.archived_at is not None or job.state == State.STOPPED or job.id in eng.slots:
                waiting.popleft()  # nothing to start any more
                continue
            spawn = job.state == State.QUEUED
            if not self.host_room(job) or (spawn and not self._global_room()):
                return  # first come, first served on each host
            waiting.popleft()
            self.releasing[job.id] = True
            eng.post(job.id, Start() if spawn else Resume())

    def queued_count(self) -> int:
        """Spawns that wait: for the global cap or for their host."""
        ids = set(self.spawns).union(*self.hosts.values())
        return sum(1 for j in ids if (job := self.eng.index.get(j)) is not None and job.state == State.QUEUED)
