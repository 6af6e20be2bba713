"""A job's worker from start to exit, and its turns: the handlers for what the worker did, and the
effects that start, prompt, steer, abort and close it. Each effect's outcome comes back to the
job's mailbox as a message; nothing here awaits inside a handler."""

from __future__ import annotations

import asyncio
import secrets
from typing import TYPE_CHECKING, Any

from roost.config import ConfigError
from roost.daemon import reports
from roost.daemon.messages import (AbortAnswer, Due, Event, Exited, NotReady, PromptAnswer, Ready, Reports,
                                   Spawned, StartFailed, SteerAnswer, WorkerMessage)
from roost.daemon.slot import Phase, Slot, Turn
from roost.daemon.worker import describe_exit
from roost.drivers.base import DriverError
from roost.models import TURN_STATES, Job, State
from roost.protocol import ErrorCode, ProtocolError
from roost.rules.lifecycle import reports_opted_out

if TYPE_CHECKING:
    from roost.daemon.engine import Engine

PROMPT_TIMEOUT = 10.0
ABORT_TIMEOUT = 5.0
#: The state a turn leaves the job in, by what it reported ("idle", or no report, is IDLE).
REPORT_STATES = {"done": State.DONE, "blocked": State.BLOCKED}


def current(eng: "Engine", job: Job, msg: WorkerMessage) -> Slot | None:
    """The job's slot if the message comes from its present worker (a late word from an old
    worker is ignored)."""
    slot = eng.slots.get(job.id)
    return slot if slot is not None and slot.worker is msg.worker else None


# -- starting ---------------------------------------------------------------------------------------
def begin_start(eng: "Engine", job: Job) -> bool:
    """Start the job's worker (from its session file when it has one). False, with the job failed
    and the reason on its timeline, when it cannot even be made."""
    if job.id in eng.slots:
        return True
    token = secrets.token_hex(16)
    holder: list[Any] = []

    def on_event(event: dict[str, Any]) -> None:
        eng.post(job.id, Event(holder[0], event))

    async def on_exit(returncode: int, tail: list[str]) -> None:
        eng.post(job.id, Exited(holder[0], returncode, tail))

    try:
        made = eng.make_worker(job, token, on_event, on_exit)
    except (ConfigError, DriverError) as exc:
        fail_start(eng, job, getattr(exc, "message", None) or str(exc))
        return False
    holder.append(made.worker)
    eng.slots[job.id] = Slot(worker=made.worker, token=token, ready_timeout=made.ready_timeout,
                             launch_session=made.session)
    eng.spawn_task(_start(eng, job.id, made.worker, made.ready_timeout))
    return True


async def _start(eng: "Engine", job_id: str, worker: Any, ready_timeout: float) -> None:
    try:
        await worker.start()
    except OSError as exc:
        eng.post(job_id, StartFailed(worker, exc.strerror and f"{exc.strerror}: {exc.filename}" or str(exc)))
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


def fail_start(eng: "Engine", job: Job, reason: str) -> None:
    with eng.store.transaction():
        eng.set_state(job, State.FAILED, reason=f"could not start its worker: {reason}")
        eng.timeline(job, "error", message=f"could not start its worker: {reason}")
        eng.save(job)
    eng.releasing.discard(job.id)
    route_report(eng, job, State.FAILED, f"could not start: {reason}")
    eng.pump()


def refuse_resumes(slot: Slot, job: Job, reason: str) -> None:
    for fut in slot.resume_replies:
        if not fut.done():
            fut.set_exception(ProtocolError(ErrorCode.REFUSED, f"job {job.id} could not be resumed: {reason}; "
                                                               "the message is kept for its next resume"))
    slot.resume_replies.clear()


def on_start_failed(eng: "Engine", job: Job, msg: StartFailed) -> None:
    slot = current(eng, job, msg)
    if slot is None:
        return
    del eng.slots[job.id]
    fail_start(eng, job, msg.reason)
    refuse_resumes(slot, job, msg.reason)


def on_spawned(eng: "Engine", job: Job, msg: Spawned) -> None:
    slot = current(eng, job, msg)
    if slot is None:
        return
    with eng.store.transaction():
        job.pid = msg.worker.pid
        job.reaped = False
        if slot.launch_session:
            job.session = slot.launch_session
        if job.state == State.QUEUED:
            eng.set_state(job, State.STARTING)
        eng.timeline(job, "worker", pid=job.pid, resumed=job.session is not None)
        eng.save(job)
        eng.kids_changed(job)


def on_ready(eng: "Engine", job: Job, msg: Ready) -> None:
    slot = current(eng, job, msg)
    if slot is None or slot.phase is not Phase.STARTING:
        return
    slot.phase = Phase.READY
    slot.idle_since = eng.monotonic()
    eng.releasing.discard(job.id)
    session = msg.data.get("session")
    if session and session != job.session:
        with eng.store.transaction():
            job.session = str(session)
            eng.save(job)
    started = deliver_next(eng, job)
    for fut in slot.resume_replies:
        if not fut.done():
            fut.set_result({"outcome": "resumed" if started or eng.inbox[job.id] == 0 else "queued", "job": job.id})
    slot.resume_replies.clear()
    eng.pump()


def on_not_ready(eng: "Engine", job: Job, msg: NotReady) -> None:
    slot = current(eng, job, msg)
    if slot is None:
        return
    with eng.store.transaction():
        eng.timeline(job, "error", message=msg.reason)
        if job.state in TURN_STATES:
            eng.set_state(job, State.FAILED, reason=msg.reason)
        eng.save(job)
    refuse_resumes(slot, job, msg.reason)
    slot.phase = Phase.CLOSING
    slot.close_reason = msg.reason
    msg.worker.kill()


# -- turns ------------------------------------------------------------------------------------------------
def deliver_next(eng: "Engine", job: Job) -> bool:
    """Hand the worker its next prompt: a waiting message, else the reports held for it.
    True when a turn started."""
    slot = eng.slots.get(job.id)
    if (slot is None or slot.phase is not Phase.READY or slot.turn is not None or job.state == State.STOPPED
            or job.archived_at is not None):
        return False
    now = eng.clock()
    message = eng.store.pending_messages(job.id)[:1] if eng.inbox[job.id] else []
    if message:
        kind, ids, text = "prompt", [message[0]["id"]], message[0]["text"]
        entry: dict[str, Any] = {"text": text}
    else:
        pending = eng.store.pending_reports(job.id)
        if not pending:
            return False
        structured = reports.structured(pending, eng.index)
        kind, ids, text = "reports", [r["id"] for r in pending], reports.prompt_text(structured)
        entry = {"reports": structured}
    run = next(eng.runs)
    turn = Turn(run=run, kind=kind, ids=ids, state_before=job.state, text_before=job.last_text)
    with eng.store.transaction():
        if kind == "prompt":
            eng.store.mark_message(ids[0], now)
            eng.inbox[job.id] -= 1
        else:
            eng.store.mark_reports(ids, now)
        eng.timeline(job, kind, run=run, **entry)
        # Working from the moment it is handed over, so a stop right after a message cuts it.
        eng.set_state(job, State.WORKING)
        eng.save(job)
    slot.turn = turn
    slot.held_since = None
    slot.idle_since = None
    eng.spawn_task(_prompt(eng, job.id, slot.worker, run, text))
    return True


async def _prompt(eng: "Engine", job_id: str, worker: Any, run: int, text: str) -> None:
    try:
        resp = await worker.request("prompt", timeout=PROMPT_TIMEOUT, message=text, run=run)
        accepted, refusal = bool(resp.get("success")), str(resp.get("error", "refused"))
    except (asyncio.TimeoutError, ConnectionError) as exc:
        accepted, refusal = False, f"the worker did not take the prompt: {exc or 'timeout'}"
    eng.post(job_id, PromptAnswer(worker, run, accepted, refusal))


def on_prompt_answer(eng: "Engine", job: Job, msg: PromptAnswer) -> None:
    slot = current(eng, job, msg)
    turn = slot.turn if slot is not None else None
    if slot is None or turn is None or turn.run != msg.run:
        return  # the turn already ended (its turn_end came first) or the worker is gone
    if msg.accepted:
        _answer(turn, {"outcome": "delivered", "job": job.id})
        return
    slot.turn = None
    slot.idle_since = eng.monotonic()
    with eng.store.transaction():  # undo: it was never delivered
        if turn.kind == "prompt":
            eng.store.undeliver_message(turn.ids[0])
            eng.inbox[job.id] += 1
        else:
            eng.store.undeliver_reports(turn.ids)
        eng.timeline(job, "error", message=f"prompt refused: {msg.refusal}")
        if job.state == State.WORKING:
            eng.set_state(job, turn.state_before)
        eng.save(job)
    _answer(turn, {"outcome": "queued", "job": job.id})


def _answer(turn: Turn, value: dict[str, Any]) -> None:
    if turn.reply is not None and not turn.reply.done():
        turn.reply.set_result(value)
    turn.reply = None


def steer(eng: "Engine", job: Job, slot: Slot) -> None:
    """Children's reports into a turn that is running (a question must not wait, or the hold ran out)."""
    pending = eng.store.pending_reports(job.id)
    if not pending:
        return
    structured = reports.structured(pending, eng.index)
    ids = [r["id"] for r in pending]
    with eng.store.transaction():
        eng.store.mark_reports(ids, eng.clock())
        eng.timeline(job, "reports", reports=structured, steer=True)
    slot.held_since = None
    eng.spawn_task(_steer(eng, job.id, slot.worker, ids, reports.prompt_text(structured)))


async def _steer(eng: "Engine", job_id: str, worker: Any, ids: list[int], text: str) -> None:
    try:
        resp = await worker.request("steer", timeout=PROMPT_TIMEOUT, message=text)
        accepted = bool(resp.get("success"))
    except (asyncio.TimeoutError, ConnectionError):
        accepted = False
    eng.post(job_id, SteerAnswer(worker, ids, accepted))


def on_steer_answer(eng: "Engine", job: Job, msg: SteerAnswer) -> None:
    if msg.accepted:
        return
    with eng.store.transaction():  # the turn ended meanwhile: they go as the next prompt instead
        eng.store.undeliver_reports(msg.ids)
    if current(eng, job, msg) is not None:
        deliver_next(eng, job)


def abort(eng: "Engine", job: Job, slot: Slot, bounded: bool = False) -> None:
    """Cut the turn in flight short; a worker that does not answer is killed."""
    if slot.turn is None:
        return
    eng.spawn_task(_abort(eng, job.id, slot.worker, slot.turn.run), bounded=bounded)


async def _abort(eng: "Engine", job_id: str, worker: Any, run: int) -> None:
    try:
        await worker.request("abort", timeout=ABORT_TIMEOUT)
        ok = True
    except (asyncio.TimeoutError, ConnectionError):
        ok = False
    eng.post(job_id, AbortAnswer(worker, run, ok))


def on_abort_answer(eng: "Engine", job: Job, msg: AbortAnswer) -> None:
    slot = current(eng, job, msg)
    if slot is None or slot.turn is None or slot.turn.run != msg.run:
        return  # the turn ended (its turn_end came) or the worker is gone
    if not msg.ok:
        msg.worker.kill()
        return
    if job.state == State.STOPPED:  # the abort was taken but no turn_end came: settle this run
        _answer(slot.turn, {"outcome": "delivered", "job": job.id})
        slot.turn = None
        slot.idle_since = eng.monotonic()
        eng.pump()


def close_worker(eng: "Engine", job: Job, slot: Slot, reason: str, bounded: bool = False) -> None:
    """Close a worker on purpose; its record stays and the next message resumes it."""
    if slot.phase is Phase.CLOSING:
        return
    slot.phase = Phase.CLOSING
    slot.close_reason = reason
    eng.spawn_task(slot.worker.close(), bounded=bounded)


# -- what the worker says --------------------------------------------------------------------------------
def on_event(eng: "Engine", job: Job, msg: Event) -> None:
    slot = current(eng, job, msg)
    if slot is None:
        return
    event = msg.event
    kind = event.get("type")
    if kind == "text":
        text = str(event.get("text", ""))
        with eng.store.transaction():
            job.last_text = text[-4000:]
            eng.timeline(job, "text", text=text)
            eng.save(job)
    elif kind == "tool":
        with eng.store.transaction():
            eng.timeline(job, "tool", name=event.get("name"), args=event.get("args"), result=event.get("result"),
                         error=bool(event.get("error")))
    elif kind == "usage":
        usage = event.get("usage")
        if isinstance(usage, dict):
            with eng.store.transaction():
                job.usage = {**job.usage, **usage}
                eng.save(job)
    elif kind in ("turn_start", "response"):
        pass  # a response here answers a command that already timed out
    elif kind == "turn_end":
        if slot.phase is Phase.CLOSING:  # a turn cut short by closing the worker is settled when it exits
            return
        if slot.turn is None or event.get("run") != slot.turn.run:
            with eng.store.transaction():
                eng.timeline(job, "note", message=f"ignored the end of an older turn (run {event.get('run')})")
            return
        end_turn(eng, job, slot, event)
    elif kind == "malformed":
        with eng.store.transaction():
            eng.timeline(job, "error", message="worker wrote a line that is not a protocol event: "
                                               f"{event.get('line', '')!r}")
    else:
        with eng.store.transaction():
            eng.timeline(job, "note", message=f"unknown worker event {kind!r}")


def end_turn(eng: "Engine", job: Job, slot: Slot, event: dict[str, Any]) -> None:
    turn = slot.turn
    assert turn is not None
    slot.turn = None
    now = eng.monotonic()
    slot.idle_since = now
    _answer(turn, {"outcome": "delivered", "job": job.id})
    outcome = event.get("outcome")
    report = turn.report
    text = job.last_text
    # A turn that only took in children's reports and handed nothing back leaves the job as it
    # was (a done parent stays done) and tells its own parent nothing new.
    quiet = (outcome == "ok" and report is None and turn.kind == "reports"
             and turn.state_before in (State.DONE, State.IDLE, State.BLOCKED, State.WAITING))
    with eng.store.transaction():
        if job.state == State.STOPPED:
            eng.timeline(job, "turn_end", outcome=outcome, note="stopped")
        elif quiet:
            eng.set_state(job, turn.state_before)
            job.last_text = turn.text_before  # the peek keeps the question or the result
            eng.timeline(job, "turn_end", outcome="ok", report=None, note="reports taken in")
        elif outcome == "ok":
            status = report[0] if report else "idle"
            if report and report[1]:
                text = report[1]
            new = REPORT_STATES.get(status, State.IDLE)
            if new == State.DONE:
                slot.done_at = now
            eng.set_state(job, new)
            eng.timeline(job, "turn_end", outcome="ok", report=status if report else None)
        elif outcome == "waiting":
            text = str(event.get("question") or text)
            eng.set_state(job, State.WAITING, question=text)
            eng.timeline(job, "turn_end", outcome="waiting")
        elif outcome == "aborted":  # nobody asked (a stop sets STOPPED first): a failed turn
            eng.set_state(job, State.FAILED, reason="the worker aborted its turn by itself")
            eng.timeline(job, "turn_end", outcome="aborted")
        else:
            text = str(event.get("error") or "the turn failed")
            eng.set_state(job, State.FAILED, reason=text)
            eng.timeline(job, "turn_end", outcome="failed", error=text)
        eng.save(job)
    if job.state != State.STOPPED and not quiet:
        route_report(eng, job, job.state, text)
    deliver_next(eng, job)
    recheck_parent(eng, job)
    eng.pump()


def on_exited(eng: "Engine", job: Job, msg: Exited) -> None:
    slot = current(eng, job, msg)
    if slot is None:
        return
    del eng.slots[job.id]
    eng.releasing.discard(job.id)
    on_purpose = slot.phase is Phase.CLOSING
    what = describe_exit(msg.returncode)
    with eng.store.transaction():
        job.pid = None
        if on_purpose:
            job.reaped = True
            eng.timeline(job, "closed", reason=slot.close_reason or "closed", exit=what)
            if job.state in TURN_STATES:  # it never sits at "working" with no worker
                eng.set_state(job, State.FAILED, reason=f"{slot.close_reason or 'closed'} during its turn")
        elif job.state == State.STOPPED or job.archived_at is not None or eng.closing_down:
            job.reaped = True
            eng.timeline(job, "closed", reason="worker ended after a stop", exit=what)
        else:
            message = f"worker {what}" + (": " + " | ".join(msg.stderr_tail) if msg.stderr_tail else "")
            eng.set_state(job, State.FAILED, reason=message)
            eng.timeline(job, "error", message=message, exit=what, stderr=msg.stderr_tail)
        eng.save(job)
        eng.kids_changed(job)
    if slot.turn is not None:
        _answer(slot.turn, {"outcome": "queued", "job": job.id})
    for fut in slot.close_replies:
        if not fut.done():
            fut.set_result({"closed": True})
    if job.state == State.FAILED and not on_purpose and job.archived_at is None:
        route_report(eng, job, State.FAILED, last_error(eng, job))
    refuse = "its worker ended before it was ready" if slot.resume_replies else ""
    if slot.reopen and not eng.closing_down and job.archived_at is None and job.state != State.STOPPED:
        replies = slot.resume_replies
        if begin_start(eng, job):
            eng.slots[job.id].resume_replies.extend(replies)
        else:
            refuse_resumes(slot, job, last_error(eng, job))
    elif refuse:
        refuse_resumes(slot, job, last_error(eng, job) if job.state == State.FAILED else refuse)
    recheck_parent(eng, job)
    eng.pump()


def last_error(eng: "Engine", job: Job) -> str:
    entry = eng.store.last_entry(job.id, "error")
    return str(entry.get("message", "failed")) if entry else "failed"


def recheck_parent(eng: "Engine", job: Job) -> None:
    """A child's turn or worker ended: its parent's close rules read its children."""
    if job.parent and job.parent in eng.slots:
        eng.post(job.parent, Due())


# -- reports to parents -----------------------------------------------------------------------------------
def route_report(eng: "Engine", child: Job, state: State, text: str) -> None:
    """Put a child's finished turn or question in its parent's outbox; the parent's mailbox
    decides what to do with it."""
    if child.parent is None or child.archived_at is not None:
        return
    parent = eng.index.get(child.parent)
    if parent is None or reports_opted_out(parent.labels) or reports_opted_out(child.labels):
        return
    question = state in (State.WAITING, State.BLOCKED)
    limit = eng.config.report_text_max
    body = text if not limit or len(text) <= limit else text[: limit - 1] + "…"
    with eng.store.transaction():
        eng.store.add_report(parent.id, child.id, state.value, body, question, eng.clock())
        eng.timeline(child, "reported", to=parent.id, state=state.value)
    slot = eng.slots.get(child.id)
    if slot is not None:
        slot.last_report_at = eng.monotonic()
    eng.post(parent.id, Reports())
