"""Recovery at start: load every record, find the workers a past daemon left running under their
shims that this one can re-adopt (``adoptable``), and make sure no other job claims a worker that
did not survive the last daemon. Runs before the event loop, so it writes the store directly."""

from __future__ import annotations

import gc
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from roost.daemon.processes.offline_stop import StopMark
from roost.daemon.processes.shim_link import ShimRecord, address_of
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.records import Facts
from roost.daemon.storage.store import Store
from roost.models import REASONED_STATES, TURN_STATES, Job, State
from roost.proctree import WorkerTree, boot_id, record_path
from roost.rules import approvals as approval_rules
from roost.rules.provider_subagents import ended_with_worker
from roost.rules.state_table import check as check_transition

log = logging.getLogger(__name__)


@dataclass
class Recovered:
    """What the engine has to follow up once it runs."""

    #: Jobs whose turn this start ended: failed (their worker was lost with the daemon), or stopped
    #: (a person's `roost stop` while no daemon ran). Their parents are told, as of any turn's end.
    ended: list[Job] = field(default_factory=list)
    #: Spawns that had not started: back in the run queue, oldest first.
    queued: list[str] = field(default_factory=list)
    #: Jobs whose workers run on under their shims, to re-adopt (with the shims' records).
    adopt: list[tuple[str, ShimRecord]] = field(default_factory=list)


def load_records(store: Store, index: JobIndex) -> None:
    """Every job into the index: a brief of each (roost/daemon/storage/briefs.py), its record
    read when first needed; with the cyclic garbage collector off while they load and the loaded
    objects frozen after: 100k jobs are hundreds of thousands of new objects, and each collection
    the allocations set off would walk all of them again (40 % of a 100k start, bench/run.py
    scale), as would every full collection for as long as the daemon runs. None of them is
    garbage; one that goes is freed by its reference count."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        index.reads_from(store.records, store.record_data)
        briefs, whole = store.briefs()
        index.load([*briefs, *whole])
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def recover(store: Store, index: JobIndex, clock: Callable[[], float], state_dir: Path) -> Recovered:
    load_records(store, index)
    marks = StopMark.load_all(state_dir)  # `roost stop` while no daemon ran (offline_stop.py)
    out = Recovered(adopt=[(job_id, r) for job_id, r in adoptable(index, state_dir) if job_id not in marks])
    kill_stale_workers(state_dir, keep={job_id for job_id, _ in out.adopt})
    kept = {job_id for job_id, _ in out.adopt}
    now = clock()

    def note(job: Job, kind: str, **data: Any) -> None:
        store.add_timeline(job.id, kind, data, now)

    def set_state(job: Job, state: State, kind: str, **data: Any) -> None:
        check_transition(job.id, job.state, state, kind)
        job.state, job.state_since = state, now
        job.reason = str(data.get("reason", "")) if state in REASONED_STATES else ""
        note(job, "state", state=state.value, **data)

    with store.transaction():
        for job in index.jobs.whole([f.id for f in index.jobs.every_fact() if _to_recover(f) and f.id not in kept]):
            changed, settled = True, bool(job.approvals)
            if settled:  # the agent that waited on them went with the last daemon
                for entry in job.approvals:
                    note(job, "approval", id=entry.get("id"), tool=entry.get("tool"), what=entry.get("what"),
                         decision="gone", by="the daemon's restart",
                         reason="the daemon restarted: the worker that asked is gone, nothing it asked ran")
                job.approvals, back, job.approval_back = [], job.approval_back, ""
                if job.state == State.WAITING and back and back != job.state.value:  # else it waits on its question
                    set_state(job, State(back), "approval-settled", note="its approvals went with its worker")
            # A person's `roost stop` while no daemon ran: of this worker, or of one whose pid never
            # reached the job's record (its start was under way).
            mark = marks.get(job.id)
            mark = mark if mark is not None and job.pid in (None, mark.pid) else None
            stopped = mark is not None and job.stoppable()
            if mark is not None and job.pid is None and not stopped:
                mark = None
            had_worker = job.pid is not None
            if had_worker:
                if job.provider_running > 0:  # the agent's own subagents went with its worker
                    for data in ended_with_worker(store.subagent_words(job.id), "the daemon restarted"):
                        note(job, "subagent", **data)
                    job.provider_running = 0
                job.pid, job.live = None, None
                job.reaped = True
            if stopped and mark is not None:
                set_state(job, State.STOPPED, "stop", by="person", reason=mark.reason)
                store.drop_messages(job.id, now)  # a stopped job takes none of what waits for it
                out.ended.append(job)
            elif mark is not None:  # no turn ran: its worker is closed, the job keeps its state
                note(job, "closed", reason=mark.reason)
            elif had_worker:
                if job.state == State.STARTING and job.archived_at is None:
                    # Its worker was still being started: no prompt was handed over yet (the first
                    # waits in its inbox), so it starts again, as a spawn that had not started does.
                    set_state(job, State.QUEUED, "requeued", reason="the daemon restarted while its worker started")
                    out.queued.append(job.id)
                elif job.state in TURN_STATES:
                    set_state(job, State.FAILED, "failure", reason="the daemon restarted while its turn ran")
                    note(job, "error", message="worker lost: the daemon restarted during the turn")
                    out.ended.append(job)
                else:
                    note(job, "closed", reason="the daemon restarted")
            elif job.state in (State.QUEUED, State.STARTING) and job.archived_at is None:
                if job.state != State.QUEUED:
                    set_state(job, State.QUEUED, "requeued", reason="the daemon restarted before it started")
                out.queued.append(job.id)
            elif job.state == State.WORKING:
                set_state(job, State.FAILED, "failure", reason="no worker after a restart")
                out.ended.append(job)
            else:
                changed = False
            if changed or settled:
                job.updated_at = now
                store.save_job(job)
                index.update(job)
    StopMark.clear(state_dir)  # recorded (or about a worker no job claims any more)
    out.queued.sort(key=lambda job_id: (index.jobs[job_id].created_at, job_id))
    return out


#: The ``closed`` reasons of a worker the live daemon would wake for a child's report whatever
#: ``wake_reaped_parent`` says: closed for room under ``max_live_workers``, or gone with a daemon.
WAKE_REASONS = ("closed for room", "the daemon restarted")


def closed_for_room(store: Store, index: JobIndex) -> list[str]:
    """Jobs with no worker whose children still run and whose worker the last daemon closed for room
    (or that did not outlive a daemon): a report from one of those children wakes them, as it did
    before the restart (the run queue's ``closed_for_room`` is memory only). A worker the idle
    reaper or a person closed stays closed, as before."""
    out = []
    for fact in index.jobs.every_fact():
        if fact.pid is not None or fact.archived_at is not None or not index.counts(fact.id)[1]:
            continue
        closed = store.last_entry(fact.id, "closed")
        if closed is not None and str(closed.get("reason", "")).startswith(WAKE_REASONS):
            out.append(fact.id)
    return out


def _to_recover(job: Facts) -> bool:
    """Whether a start has something to settle for the job: approvals that went with the last
    daemon, a worker it claims, or a spawn or turn that was under way (what ``recover`` visits)."""
    return bool(job.approvals) or job.pid is not None or job.state in (State.QUEUED, State.STARTING, State.WORKING)


def adoptable(index: JobIndex, state_dir: Path) -> list[tuple[str, ShimRecord]]:
    """The jobs whose workers a new daemon takes over: under a shim on this machine (a Ray host's job
    too: its relay to the actor runs under one here; an SSH host's worker has no record here), ready
    when the last daemon wrote the record (not starting, not being closed), no approval pending that
    its adapter's snapshot does not carry whole (rules/approvals.py ``carried``: Claude Code's do), a
    driver whose adapter
    keeps nothing in memory or restores what it knew (all but Codex's), and a shim that is still the
    one started (its record, found by the job's id, names its pid and start time, this boot, and the
    job's worker)."""
    boot, out = boot_id(), []
    for job in index.jobs.whole([f.id for f in index.jobs.every_fact() if f.pid is not None]):
        live = job.live or {}
        if not approval_rules.carried(job.approvals, live.get("adapter")) or live.get("phase") != "ready":
            continue
        record = ShimRecord.load(record_path(state_dir, job.id))
        if (record is not None and record.adoptable and record.tree.boot == boot and record.tree.pid == job.pid
                and record.alive()):
            out.append((job.id, record))
    return out


def kill_stale_workers(state_dir: Path, keep: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Kill every worker a dead daemon left, and every process of its tree (its agents too, in
    sessions of their own or orphaned to PID 1 when the worker died), from the records the daemon
    writes when it starts a worker — all of them, also those whose pid never reached the job's
    record. By pid and start time, so a recycled pid is never killed; a record from another boot
    names nothing alive."""
    folder = record_path(state_dir, "x").parent
    if not folder.is_dir():
        return
    boot = boot_id()
    named = set()  # the sockets records name (a spare's keeps its name when a job takes it)
    for path in sorted(folder.glob("*.json")):
        if path.stem in keep:
            if (kept := ShimRecord.load(path)) is not None:
                named.add(Path(kept.socket))
            continue
        tree = WorkerTree.load(path)
        if tree is not None and tree.boot == boot and not tree.kill_now():
            log.error("%s: processes of an old worker (%d) are still alive after SIGKILL", path.stem, tree.pid)
        shim = ShimRecord.load(path)
        if shim is not None and tree is not None and tree.boot == boot:
            shim.kill()
            Path(shim.socket).unlink(missing_ok=True)
        path.unlink(missing_ok=True)
    for sock in sorted(set(folder.glob("*.sock")) - named):
        end_unrecorded_shim(sock)


def end_unrecorded_shim(path: Path) -> None:
    """A socket no record names: the shim (if one is there) was started by a daemon that
    died before it wrote the record down, so it still ends with its first connection
    (roost/programs/shim.py ``--ephemeral``). Connect and leave at once (it need not have answered
    yet: the connection waits for it), and remove the socket; a shim no daemon ever reached ends by
    itself within its bound."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.setblocking(False)
        try:
            with address_of(path) as address:
                sock.connect(address)
        except OSError:
            pass  # nobody listens (another boot's file), or its backlog is full: its bound ends it
    path.unlink(missing_ok=True)
