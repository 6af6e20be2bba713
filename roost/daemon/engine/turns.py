"""A job's turns: handing the worker a prompt (a message, or children's reports), steering
reports into a running turn, aborting it, and settling it when its turn_end comes. Each effect's
outcome comes back to the job's mailbox as a message; nothing here awaits inside a handler."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

from roost.daemon.engine import approvals, limits, reports, spend, stall_watch
from roost.daemon.engine.messages import AbortAnswer, Due, Event, PromptAnswer, SteerAnswer
from roost.daemon.engine.slot import Ending, Phase, Slot, Turn
from roost.daemon.engine.ports import EngineApi
from roost.models import QUESTION_MAX, Job, State, cut_middle
from roost.protocol import ENTRY_MAX, without_lone_surrogates
from roost.rules.budgets import stop_reason as budget_stop

from roost.rules import quotas

#: The most background commands of one worker whose ids the daemon keeps.
BACKGROUND_MAX = 256


PROMPT_TIMEOUT = 10.0
ABORT_TIMEOUT = 5.0
#: How much of a provider subagent's id, title or state word its entries keep (its text: ENTRY_MAX).
SUBAGENT_WORD_MAX = 200
#: How many characters of what a job said last its record keeps (the peek, a report's text).
LAST_TEXT = 4000
#: The state a turn leaves the job in, by what it reported ("idle", or no report, is IDLE).
REPORT_STATES = {"done": State.DONE, "blocked": State.BLOCKED}


def deliver_next(eng: EngineApi, job: Job) -> bool:
    """Hand the worker its next prompt: a waiting message, else the reports held for it.
    True when a turn started."""
    slot = eng.slots.get(job.id)
    if (slot is None or slot.phase is not Phase.READY or slot.turn is not None or job.state == State.STOPPED
            or job.archived_at is not None or limits.held(eng, job, slot, eng.monotonic())
            or slot.restart_for_cap or spend.turn_refusal(eng, job) is not None):  # past a cap, no turn starts
        return False
    now = eng.clock()
    message = eng.store.next_message(job.id) if eng.inbox[job.id] else None
    if message is not None:
        kind, ids, text = "prompt", [message["id"]], message["text"]
        entry: dict[str, Any] = {"text": text}
    else:
        pending = eng.store.pending_reports(job.id)
        if not pending:
            return False
        structured, ids = reports.batch(pending, eng.index)
        kind, text = "reports", reports.prompt_text(structured)
        entry = {"reports": structured}
    run = next(eng.runs)
    limits.settled(eng, job, slot)  # no limit holds its turn any more
    turn = Turn(run=run, kind=kind, ids=ids, state_before=job.state, text_before=job.last_text)
    if kind == "prompt":
        eng.take_message(job.id, ids[0])
    else:
        eng.store.mark_reports(ids, now)
    eng.timeline(job, kind, run=run, **entry)
    # Working from the moment it is handed over, so a stop right after a message cuts it.
    eng.set_state(job, State.WORKING, "turn")
    eng.save(job)
    slot.turn = turn
    slot.held_since = None
    slot.idle_since = None
    stall_watch.prompt_given(slot, eng.monotonic())
    # The prompt goes to the worker once the store says it was handed over (the batch's commit).
    eng.spawn_task(_prompt(eng, job.id, slot.worker, run, text))
    return True


async def _prompt(eng: EngineApi, job_id: str, worker: Any, run: int, text: str) -> None:
    try:
        resp = await worker.request("prompt", timeout=PROMPT_TIMEOUT, message=text, run=run)
        accepted, refusal = bool(resp.get("success")), str(resp.get("error", "refused"))
    except (asyncio.TimeoutError, ConnectionError) as exc:
        accepted, refusal = False, f"the worker did not take the prompt: {exc or 'timeout'}"
    eng.post(job_id, PromptAnswer(worker, run, accepted, refusal))


def on_prompt_answer(eng: EngineApi, job: Job, msg: PromptAnswer) -> None:
    slot = eng.current(job, msg)
    turn = slot.turn if slot is not None else None
    if slot is None or turn is None or turn.run != msg.run:
        return  # the turn already ended (its turn_end came first) or the worker is gone
    if msg.accepted:
        stall_watch.turn_began(eng, job, slot)
        eng.answer_turn(turn, {"outcome": "delivered", "job": job.id})
        return
    slot.turn = None
    stall_watch.turn_over(eng, job, slot)
    slot.idle_since = eng.monotonic()
    # undo: it was never delivered
    if turn.kind == "prompt":
        eng.put_back_message(job.id, turn.ids[0])
    else:
        eng.store.undeliver_reports(turn.ids)
    eng.timeline(job, "error", message=f"prompt refused: {msg.refusal}")
    if job.state == State.WORKING:
        eng.set_state(job, turn.state_before, "prompt-refused")
    eng.save(job)
    eng.answer_turn(turn, {"outcome": "queued", "job": job.id})


def steer(eng: EngineApi, job: Job, slot: Slot) -> None:
    """Children's reports into a turn that is running (a question must not wait, or the hold ran out)."""
    pending = eng.store.pending_reports(job.id)
    if not pending:
        return
    structured, ids = reports.batch(pending, eng.index)
    eng.store.mark_reports(ids, eng.clock())
    eng.timeline(job, "reports", reports=structured, steer=True)
    slot.held_since = None
    eng.spawn_task(_steer(eng, job.id, slot.worker, ids, reports.prompt_text(structured)))


async def _steer(eng: EngineApi, job_id: str, worker: Any, ids: list[int], text: str) -> None:
    try:
        resp = await worker.request("steer", timeout=PROMPT_TIMEOUT, message=text)
        accepted = bool(resp.get("success"))
    except (asyncio.TimeoutError, ConnectionError):
        accepted = False
    eng.post(job_id, SteerAnswer(worker, ids, accepted))


def on_steer_answer(eng: EngineApi, job: Job, msg: SteerAnswer) -> None:
    if msg.accepted:
        return
    # the turn ended meanwhile: they go as the next prompt instead
    eng.store.undeliver_reports(msg.ids)
    if eng.current(job, msg) is not None:
        deliver_next(eng, job)


def cut(slot: Slot, why: str, by: str) -> None:
    """Say why the turn in flight is being cut short, and who asked (the first reason stays)."""
    if slot.turn is not None and slot.turn.ending is None:
        slot.turn.ending = Ending(why, by)


def abort(eng: EngineApi, job: Job, slot: Slot, bounded: bool = False,
          first: Coroutine[Any, Any, None] | None = None) -> None:
    """Cut the turn in flight short; a worker that does not answer is killed. ``first`` (the denial of
    what the agent waits on) goes to the worker before the abort, also when no turn runs."""
    effect = abort_effect(eng, job, slot, first)
    if effect is not None:
        eng.spawn_task(effect, bounded=bounded)


def abort_effect(eng: EngineApi, job: Job, slot: Slot,
                 first: Coroutine[Any, Any, None] | None = None) -> Coroutine[Any, Any, None] | None:
    """What ``abort`` runs: ``first``, then the abort of the turn in flight; ``first`` alone (or None)
    when nothing runs. With no turn but subagents of the agent's own that run, the abort goes too: it
    stops them, and so with commands it runs in the background (docs/protocols.md). For an effect that must come after both (closing the worker)."""
    if slot.turn is None and not job.provider_running and not slot.background:
        return first
    run = slot.turn.run if slot.turn is not None else None
    return _abort(eng, job.id, slot.worker, run, first)


async def _abort(eng: EngineApi, job_id: str, worker: Any, run: int | None,
                 first: Coroutine[Any, Any, None] | None = None) -> None:
    if first is not None:
        await first
    try:
        await worker.request("abort", timeout=ABORT_TIMEOUT)
        ok = True
    except (asyncio.TimeoutError, ConnectionError):
        ok = False
    eng.post(job_id, AbortAnswer(worker, run, ok))


def on_abort_answer(eng: EngineApi, job: Job, msg: AbortAnswer) -> None:
    slot = eng.current(job, msg)
    if slot is None or slot.turn is None or slot.turn.run != msg.run:
        return  # the turn ended (its turn_end came) or the worker is gone
    if not msg.ok:
        eng.effect(msg.worker.kill)
        return
    if slot.turn.ending is not None:  # the abort was taken but no turn_end came: settle this run
        eng.answer_turn(slot.turn, {"outcome": "delivered", "job": job.id})
        slot.turn = None
        stall_watch.turn_over(eng, job, slot)
        slot.idle_since = eng.monotonic()
        eng.pump()


def on_event(eng: EngineApi, job: Job, msg: Event) -> None:
    """One step of the worker, its events in one savepoint with its line's seq and its adapter's
    snapshot: a later daemon that re-adopts the worker gets exactly the lines not committed again."""
    slot = eng.current(job, msg)
    if slot is None:
        return
    advanced = msg.seq > slot.seq
    if advanced:  # applied with this batch; once it is committed, the shim may forget the line
        seq, worker = msg.seq, msg.worker
        slot.seq = seq
        eng.effect(lambda: worker.ack(seq))
    if msg.state is not None:
        slot.adapter = msg.state
    if advanced or msg.state is not None:  # both go with the record (``live_of``)
        eng.save_quietly(job)
    for event in msg.events:
        _on_one(eng, job, slot, without_lone_surrogates(event))


def _on_one(eng: EngineApi, job: Job, slot: Slot, event: dict[str, Any]) -> None:
    kind = event.get("type")
    if kind in ("text", "tool", "turn_end"):  # a real event: the agent is past what it retried
        limits.clear_notice(eng, job)
    if kind not in ("response", "malformed"):
        stall_watch.heard(eng, job, slot, str(kind))
    if kind == "text" and quotas.binary(str(event.get("text", ""))):  # an agent's that no person reads
        eng.timeline(job, "note", message=quotas.binary_words(len(str(event["text"]).encode(errors="replace"))))
    elif kind == "text":
        text = str(event.get("text", ""))
        # A text that continues the one before (a command's output, cut in pieces) adds to it,
        # so the peek and the report hold the end of the output, not of its last piece.
        job.last_text = ((job.last_text if event.get("continues") else "") + text)[-LAST_TEXT:]
        eng.timeline(job, "text", text=text)
        eng.save(job)
    elif kind == "tool":
        eng.timeline(job, "tool", name=event.get("name"), args=event.get("args"), result=event.get("result"),
                     error=bool(event.get("error")))
    elif kind == "usage":
        if isinstance(event.get("call"), dict):  # one model call's spend: kept once, budgets looked at
            spend.on_call(eng, job, event["call"])
        usage = event.get("usage")
        if isinstance(usage, dict):
            job.usage = {**job.usage, **usage}
            eng.save(job)
    elif kind == "turn_start":
        if event.get("own"):
            begin_own_turn(eng, job, slot)
    elif kind == "approval":
        approvals.on_asked(eng, job, slot, event)
    elif kind == "approval_withdrawn":
        approvals.on_withdrawn(eng, job, slot, event)
    elif kind == "response":
        pass  # a response here answers a command that already timed out
    elif kind == "turn_end":
        if slot.phase is Phase.CLOSING:  # a turn cut short by closing the worker is settled when it exits
            return
        turn = slot.turn
        if turn is None or not (event.get("run") == turn.run or (event.get("own") and turn.kind == "own")):
            what = "a turn of the agent's own" if event.get("own") else f"an older turn (run {event.get('run')})"
            eng.timeline(job, "note", message=f"ignored the end of {what}")
            return
        end_turn(eng, job, slot, event)
    elif kind == "subagent":  # a provider-native subagent (Claude Code's Task): only the parent's timeline has it
        data = {k: _word(event.get(k)) for k in ("id", "title", "state")}
        data["text"] = event.get("text")  # cut to ENTRY_MAX by eng.timeline
        slot.subagent_word_at = eng.monotonic()
        if eng.index.count_subagent(job, data, lambda: eng.store.subagent_words(job.id)):
            eng.save(job)  # its row's counts changed (a new one, or one that finished)
        eng.timeline(job, "subagent", **data)
    elif kind == "background":  # a command the agent runs in the background of this job (not a subagent)
        ident = _word(event.get("id"))
        if not event.get("running"):
            slot.background.discard(ident)
        elif len(slot.background) < BACKGROUND_MAX:  # past it a stop still aborts: the set is not empty
            slot.background.add(ident)
        eng.timeline(job, "note", message=str(event.get("message", "")), background=ident)
    elif kind == "note":  # the worker side says what it left out (output over its bounds)
        eng.timeline(job, "note", message=str(event.get("message", "")))
    elif kind == "limited":
        limits.on_limited(eng, job, slot, event)
    elif kind == "retrying":
        limits.on_retrying(eng, job, event)
    elif kind == "malformed":
        eng.timeline(job, "error", message="worker wrote a line that is not a protocol event: "
                                           f"{event.get('line', '')!r}")
    else:
        eng.timeline(job, "note", message=f"unknown worker event {kind!r}")


def begin_own_turn(eng: EngineApi, job: Job, slot: Slot) -> None:
    """The agent started a turn nobody prompted (Claude Code taking in what a background subagent
    found): the job works for it as for any turn, so the time rules leave the worker alone, a stop
    aborts it and a message waits for its end, which settles it like a prompt's."""
    if slot.phase is not Phase.READY or slot.turn is not None:
        return  # a prompt is in flight: its own turn_end settles it (Claude Code answers it after this one)
    slot.turn = Turn(run=next(eng.runs), kind="own", ids=[], state_before=job.state, text_before=job.last_text)
    slot.idle_since = None
    stall_watch.turn_began(eng, job, slot)
    over = spend.over_caller(eng, job)
    stopped = job.state == State.STOPPED or over is not None
    if stopped:
        eng.timeline(job, "note", message="the agent began a turn of its own after a stop; it is aborted"
                     if over is None else "the agent began a turn of its own past the budget; it is aborted")
    else:
        eng.set_state(job, State.WORKING, "turn", note="a turn of the agent's own")
    eng.save(job)
    if stopped:
        cut(slot, "stopped-before", over or "person")
        abort(eng, job, slot)


def _word(value: Any) -> Any:
    """A subagent's id, title or state as recorded: a string cut to SUBAGENT_WORD_MAX (the same
    cut for every entry of one, so a long id still names one subagent); anything else as sent."""
    return value[:SUBAGENT_WORD_MAX] if isinstance(value, str) else value


def end_turn(eng: EngineApi, job: Job, slot: Slot, event: dict[str, Any]) -> None:
    turn = slot.turn
    assert turn is not None
    slot.turn = None
    stall_watch.turn_over(eng, job, slot)
    now = eng.monotonic()
    slot.idle_since = now
    eng.answer_turn(turn, {"outcome": "delivered", "job": job.id})
    if slot.restart_for_cap:  # between turns now: restart it with its new budget
        eng.post(job.id, Due())
    outcome = event.get("outcome")
    report = turn.report
    text = job.last_text
    # A turn that only took in children's reports and handed nothing back leaves the job as it
    # was (a done parent stays done) and tells its own parent nothing new.
    quiet = (outcome == "ok" and report is None and turn.kind == "reports"
             and turn.state_before in (State.DONE, State.IDLE, State.BLOCKED, State.WAITING))
    over = spend.over_caller(eng, job) if turn.ending is None and outcome not in ("ok", "waiting") else None
    if over is not None:  # the agent's own cap ended it (Claude Code's error_max_budget_usd): the budget's stop
        eng.set_state(job, State.STOPPED, "stop", by=over, reason=budget_stop(over))
        eng.drop_messages(job.id)
        turn.ending = Ending("stop", over)
    ending = turn.ending  # how it ends is decided from the turn, not from the job's state now
    cut_short = ending is not None
    if ending is not None:
        note = "over max_turn_time" if ending.why == "over-time" else "stopped"
        eng.timeline(job, "turn_end", outcome=outcome, note=note, by=ending.by)
    elif quiet:
        eng.set_state(job, turn.state_before, "turn-end")
        if job.state == State.DONE:  # done again from now: the auto-close wait starts over
            slot.done_at = now
        job.last_text = turn.text_before  # the peek keeps the question or the result
        eng.timeline(job, "turn_end", outcome="ok", report=None, note="reports taken in")
    elif outcome == "ok":
        status = report[0] if report else "idle"
        if report and report[1]:
            text = report[1]
        new = REPORT_STATES.get(status, State.IDLE)
        if new == State.DONE:
            slot.done_at = now
        eng.set_state(job, new, "turn-end")
        eng.timeline(job, "turn_end", outcome="ok", report=status if report else None)
    elif outcome == "waiting":
        text = str(event.get("question") or text)
        job.question = cut_middle(text, QUESTION_MAX)  # what its rows carry while it waits
        # Bounded like a text entry (Claude Code's permission question quotes a tool's whole input), cut
        # in the middle so the question itself, at its end, stays (Claude Code also sends all of it as text).
        cut = {"cut": len(text) - ENTRY_MAX + 1} if len(text) > ENTRY_MAX else {}
        eng.set_state(job, State.WAITING, "turn-end", question=cut_middle(text, ENTRY_MAX), **cut)
        eng.timeline(job, "turn_end", outcome="waiting")
    elif outcome == "aborted":  # nobody asked (a stop or an archive cuts the turn first): a failed turn
        eng.set_state(job, State.FAILED, "turn-end", reason="the worker aborted its turn by itself")
        eng.timeline(job, "turn_end", outcome="aborted")
    elif limits.bounced(eng, job, slot, turn, str(event.get("error") or "")):
        cut_short = True  # nothing to report: the turn goes again at the reset
    else:
        text = str(event.get("error") or "the turn failed")
        eng.set_state(job, State.FAILED, "turn-end", reason=text)
        eng.timeline(job, "turn_end", outcome="failed", error=text)
    if job.state != State.RATE_LIMITED:
        slot.bounces = 0
    eng.save(job)
    if not cut_short and not quiet:
        reports.route(eng, job, job.state, text)
    deliver_next(eng, job)
    eng.recheck_parent(job)
    eng.pump()


