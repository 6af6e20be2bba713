"""A job's worker from start to exit: making and starting it, its readiness, closing it on
purpose, and what its exit means for the record. Each effect's outcome comes back to the job's
mailbox as a message; nothing here awaits inside a handler."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, Coroutine

from roost.config import ConfigError
from roost.daemon.engine import approvals, limits, reports
from roost.daemon.git import worktrees
from roost.daemon.git.run import GitError
from roost.daemon.engine.messages import Event, Evict, Exited, NotReady, Ready, Shutdown, Spawned, StartFailed
from roost.daemon.engine.run_queue import Placed
from roost.daemon.engine.slot import Phase, Slot
from roost.daemon.engine.turns import abort_effect, cut, deliver_next
from roost.daemon.engine.ports import EngineApi
from roost.daemon.processes.process import describe_exit
from roost.daemon.processes.shim_link import token_hash
from roost.drivers.base import DriverError
from roost.models import TURN_STATES, Job, State
from roost.protocol import ErrorCode, ProtocolError
from roost.rules.live_workers import closable
from roost.rules.provider_subagents import ended_with_worker



def begin_start(eng: EngineApi, job: Job) -> Placed:
    """Start the job's worker (from its session file when it has one). WAITING when its host has
    no room or no live-worker place is free (it waits in that queue, with no slot); FAILED, with
    the job failed and the reason on its timeline, when it cannot even be made."""
    if job.id in eng.slots:
        return Placed.STARTED
    if not eng.queue.host_room(job):
        eng.queue.wait_for_host(job)
        return Placed.WAITING
    if not eng.queue.live_room(job):
        eng.queue.wait_for_live(job)
        return Placed.WAITING
    eng.queue.closed_for_room.discard(job.id)
    token = secrets.token_hex(16)
    holder: list[Any] = []
    on_event, on_exit = sinks(eng, job.id, holder)
    try:
        made = eng.make_worker(job, token, on_event, on_exit)
    except (ConfigError, DriverError) as exc:
        fail_start(eng, job, getattr(exc, "message", None) or str(exc))
        return Placed.FAILED
    except OSError as exc:  # what the driver makes for it (a directory) cannot be: not the store's failure
        fail_start(eng, job, _os_reason(exc))
        return Placed.FAILED
    holder.append(made.worker)
    eng.slots[job.id] = Slot(worker=made.worker, token_hash=token_hash(token), ready_timeout=made.ready_timeout,
                             launch_session=made.session)
    eng.spawn_task(_start(eng, job.id, made.worker, made.ready_timeout))
    return Placed.STARTED


def sinks(eng: EngineApi, job_id: str, holder: list[Any]) -> tuple[Any, Any]:
    """What a worker calls with each step's events (a list, or a test's one event), and its exit. A step
    is one message, with the sequence number of its line and its adapter's snapshot after it."""

    def on_event(events: list[dict[str, Any]] | dict[str, Any]) -> None:
        worker = holder[0]
        eng.post(job_id, Event(worker, events if isinstance(events, list) else [events],
                               getattr(worker, "line_seq", 0), getattr(worker, "adapter_state", None)))

    async def on_exit(returncode: int, tail: list[str]) -> None:
        eng.post(job_id, Exited(holder[0], returncode, tail))

    return on_event, on_exit


async def _start(eng: EngineApi, job_id: str, worker: Any, ready_timeout: float) -> None:
    if reason := await eng.prepare_host(job_id, worker):  # a job on another host: its link, its launch there
        eng.post(job_id, StartFailed(worker, reason))
        return
    try:
        await worktrees.before_start(eng.index.get(job_id), eng.config.worktree)
    except GitError as exc:  # nothing started: the job fails with what the setup said
        eng.post(job_id, StartFailed(worker, str(exc)))
        return
    except OSError as exc:  # copying files in, writing its mark: the machine refused
        eng.post(job_id, StartFailed(worker, f"worktree setup failed: {_os_reason(exc)}"))
        return
    try:
        await worker.start()
    except OSError as exc:
        eng.post(job_id, StartFailed(worker, _os_reason(exc)))
        return
    eng.post(job_id, Spawned(worker))
    try:
        state = await worker.request("get_state", timeout=ready_timeout)
    except asyncio.TimeoutError:
        eng.post(job_id, NotReady(worker, f"worker did not answer within {ready_timeout:.0f}s"))
        return
    except ConnectionError:
        return  # it exited: Exited says how
    eng.post(job_id, Ready(worker, state.get("data") or {}))


def _os_reason(exc: OSError) -> str:
    return exc.strerror and f"{exc.strerror}: {exc.filename}" or str(exc)


def fail_start(eng: EngineApi, job: Job, reason: str) -> None:
    eng.set_state(job, State.FAILED, "failure", reason=f"could not start its worker: {reason}")
    eng.timeline(job, "error", message=f"could not start its worker: {reason}")
    eng.save(job)
    eng.queue.releasing.pop(job.id, None)
    reports.route(eng, job, State.FAILED, f"could not start: {reason}")
    eng.pump()


def refuse_resumes(eng: EngineApi, slot: Slot, job: Job, reason: str) -> None:
    refusal = ProtocolError(ErrorCode.REFUSED, f"job {job.id} could not be resumed: {reason}; "
                                               "the message is kept for its next resume")
    for fut in slot.resume_replies:
        eng.settle(fut, error=refusal)
    slot.resume_replies.clear()


def on_start_failed(eng: EngineApi, job: Job, msg: StartFailed) -> None:
    slot = eng.current(job, msg)
    if slot is None:
        return
    del eng.slots[job.id]
    fail_start(eng, job, msg.reason)
    refuse_resumes(eng, slot, job, msg.reason)
    worktrees.after_exit(eng, job)


def on_spawned(eng: EngineApi, job: Job, msg: Spawned) -> None:
    slot = eng.current(job, msg)
    if slot is None:
        return
    if slot.phase is Phase.CLOSING:  # closed (archived, shut down) before its process existed
        eng.spawn_task(msg.worker.close())
    job.pid = msg.worker.pid
    job.reaped = False
    resumed = job.session is not None  # a session before this launch; a new job's is made for it
    if slot.launch_session:
        job.session = slot.launch_session
    if job.state == State.QUEUED:
        eng.set_state(job, State.STARTING, "started")
    eng.timeline(job, "worker", pid=job.pid, resumed=resumed)
    eng.save(job)
    eng.kids_changed(job)


def on_ready(eng: EngineApi, job: Job, msg: Ready) -> None:
    slot = eng.current(job, msg)
    if slot is None or slot.phase is not Phase.STARTING:
        return
    slot.phase = Phase.READY
    slot.idle_since = eng.monotonic()
    eng.save_quietly(job)  # a later daemon may re-adopt it from now on
    eng.queue.releasing.pop(job.id, None)
    session = msg.data.get("session")
    if session and session != job.session:
        job.session = str(session)
        eng.save(job)
    limits.restore(eng, job, slot)
    started = deliver_next(eng, job)
    for fut in slot.resume_replies:
        eng.settle(fut, {"outcome": "resumed" if started or eng.inbox[job.id] == 0 else "queued", "job": job.id})
    slot.resume_replies.clear()
    eng.pump()


def on_not_ready(eng: EngineApi, job: Job, msg: NotReady) -> None:
    slot = eng.current(job, msg)
    if slot is None:
        return
    eng.timeline(job, "error", message=msg.reason)
    if job.state in TURN_STATES:
        eng.set_state(job, State.FAILED, "failure", reason=msg.reason)
    eng.save(job)
    refuse_resumes(eng, slot, job, msg.reason)
    slot.phase = Phase.CLOSING
    slot.close_reason = msg.reason
    eng.effect(msg.worker.kill)


def on_evict(eng: EngineApi, job: Job, msg: Evict) -> None:
    """Close the idle worker the live-worker cap chose, if nothing holds it by now; else the run
    queue chooses again."""
    eng.queue.evicting.discard(job.id)
    slot = eng.slots.get(job.id)
    if slot is not None and slot.phase is Phase.READY and closable(job, eng.facts(job)):
        eng.queue.closed_for_room.add(job.id)
        close_worker(eng, job, slot, f"closed for room: max_live_workers = {eng.config.max_live_workers}")
    else:
        eng.pump()


def on_shutdown(eng: EngineApi, job: Job, msg: Shutdown) -> None:
    """The daemon shuts down: what the agent waits on is denied, its turn aborted (closing stdin
    mid-stream loses pi's partial answer), then the worker closed; its exit writes the record."""
    slot = eng.slots.get(job.id)
    if slot is None or slot.phase is Phase.CLOSING:
        return
    denials = approvals.tell_denied(eng, job, slot, "the roost daemon shut down")  # its exit settles them as gone
    cut(slot, "close", "daemon")
    close_worker(eng, job, slot, "the daemon shut down", first=abort_effect(eng, job, slot, denials))


def close_worker(eng: EngineApi, job: Job, slot: Slot, reason: str, bounded: bool = False,
                 first: Coroutine[Any, Any, None] | None = None) -> None:
    """Close a worker on purpose; its record stays and the next message resumes it. ``first`` (the
    denial of what its agent waits on) goes to the worker before it is closed."""
    if slot.phase is Phase.CLOSING:
        if first is not None:
            eng.spawn_task(first, bounded=bounded)
        return
    slot.phase = Phase.CLOSING
    slot.close_reason = reason
    eng.save_quietly(job)  # a later daemon does not re-adopt a worker being closed
    eng.spawn_task(_close(slot.worker, first), bounded=bounded)


async def _close(worker: Any, first: Coroutine[Any, Any, None] | None) -> None:
    if first is not None:
        await first
    await worker.close()


def end_own_subagents(eng: EngineApi, job: Job, why: str) -> None:
    """The agent's own subagents still working ran in the worker that is gone: its timeline says
    they ended, so neither its row nor a later worker's counts keep them running."""
    if job.provider_running > 0:
        for data in ended_with_worker(eng.store.subagent_words(job.id), why or "closed"):
            eng.timeline(job, "subagent", **data)
        job.provider_running = 0


def on_exited(eng: EngineApi, job: Job, msg: Exited) -> None:
    slot = eng.current(job, msg)
    if slot is None:
        return
    del eng.slots[job.id]
    eng.effect(getattr(msg.worker, "release", lambda: None))  # once committed, its shim may end
    eng.queue.releasing.pop(job.id, None)
    on_purpose = slot.phase is Phase.CLOSING
    #: A stop or an archive was cutting its turn (the job may have been restarted since).
    cut_short = slot.turn is not None and slot.turn.ending is not None
    what = describe_exit(msg.returncode)
    approvals.gone(eng, job, f"its worker {what} before anyone answered")
    end_own_subagents(eng, job, slot.close_reason if on_purpose else f"worker {what}")
    job.pid = None
    if on_purpose:
        job.reaped = True
        eng.timeline(job, "closed", reason=slot.close_reason or "closed", exit=what)
        if job.state in TURN_STATES:  # it never sits at "working" with no worker
            eng.set_state(job, State.FAILED, "failure", reason=f"{slot.close_reason or 'closed'} during its turn")
    elif job.state == State.STOPPED or cut_short or job.archived_at is not None or eng.closing_down:
        job.reaped = True
        eng.timeline(job, "closed", reason="worker ended after a stop", exit=what)
    else:
        message = f"worker {what}" + (": " + " | ".join(msg.stderr_tail) if msg.stderr_tail else "")
        eng.set_state(job, State.FAILED, "failure", reason=message)
        eng.timeline(job, "error", message=message, exit=what, stderr=msg.stderr_tail)
    eng.save(job)
    eng.kids_changed(job)
    if slot.turn is not None:
        eng.answer_turn(slot.turn, {"outcome": "queued", "job": job.id})
    for fut in slot.close_replies:
        eng.settle(fut, {"closed": True})
    if job.state == State.FAILED and not on_purpose and job.archived_at is None:
        reports.route(eng, job, State.FAILED, eng.last_error(job))
    refuse = "its worker ended before it was ready" if slot.resume_replies else ""
    if (slot.reopen or (cut_short and eng.inbox[job.id])) and not eng.closing_down and job.archived_at is None and job.state != State.STOPPED:
        placed = begin_start(eng, job)
        if placed is Placed.STARTED:
            eng.slots[job.id].resume_replies.extend(slot.resume_replies)
        elif placed is Placed.WAITING:
            for fut in slot.resume_replies:
                eng.settle(fut, {"outcome": "queued", "job": job.id})
        else:
            refuse_resumes(eng, slot, job, eng.last_error(job))
    elif refuse:
        refuse_resumes(eng, slot, job, eng.last_error(job) if job.state == State.FAILED else refuse)
    worktrees.after_exit(eng, job)
    eng.recheck_parent(job)
    eng.pump()
