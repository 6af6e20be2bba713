"""Recovery at start: load every record, and make sure no job claims a worker that did not
survive the last daemon. Runs before the event loop, so it writes the store directly."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from roost import paths
from roost.daemon.index import JobIndex
from roost.daemon.store import Store
from roost.models import TURN_STATES, Job, State
from roost.proctree import WorkerTree, boot_id, record_path

log = logging.getLogger(__name__)


@dataclass
class Recovered:
    """What the engine has to follow up once it runs."""

    #: Jobs the restart failed (their parents are told).
    lost: list[Job] = field(default_factory=list)
    #: Spawns that had not started: back in the run queue, oldest first.
    queued: list[str] = field(default_factory=list)


def recover(store: Store, index: JobIndex, clock: Callable[[], float]) -> Recovered:
    index.load(store.jobs())
    out = Recovered()
    now = clock()

    def note(job: Job, kind: str, **data: Any) -> None:
        store.add_timeline(job.id, kind, data, now)

    def set_state(job: Job, state: State, **data: Any) -> None:
        job.state, job.state_since = state, now
        note(job, "state", state=state.value, **data)

    with store.transaction():
        for job in index.jobs.values():
            changed = True
            if job.pid is not None:
                kill_stale_worker(job)
                job.pid = None
                job.reaped = True
                if job.state in TURN_STATES:
                    set_state(job, State.FAILED, reason="the daemon restarted while its turn ran")
                    note(job, "error", message="worker lost: the daemon restarted during the turn")
                    out.lost.append(job)
                else:
                    note(job, "closed", reason="the daemon restarted")
            elif job.state in (State.QUEUED, State.STARTING) and job.archived_at is None:
                if job.state != State.QUEUED:
                    set_state(job, State.QUEUED, reason="the daemon restarted before it started")
                out.queued.append(job.id)
            elif job.state == State.WORKING:
                set_state(job, State.FAILED, reason="no worker after a restart")
                out.lost.append(job)
            else:
                changed = False
            if changed:
                job.updated_at = now
                store.save_job(job)
                index.update(job)
    out.queued.sort(key=lambda job_id: (index.jobs[job_id].created_at, job_id))
    return out


def kill_stale_worker(job: Job) -> None:
    """Kill the worker a dead daemon left for this job, and every process of its tree (its agents
    too, in sessions of their own or orphaned to PID 1 when the worker died), from the record the
    daemon wrote when it started the worker: by pid and start time, so a recycled pid is never
    killed. A record from another boot names nothing alive."""
    path = record_path(paths.resolve().state_dir, job.id)
    tree = WorkerTree.load(path)
    if tree is None:
        log.warning("job %s: no record of its worker %s; nothing of it is killed", job.id, job.pid)
        return
    if tree.boot == boot_id() and not tree.kill_now():
        log.error("job %s: processes of its old worker %d are still alive after SIGKILL", job.id, tree.pid)
    path.unlink(missing_ok=True)
