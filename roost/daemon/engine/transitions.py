"""The transition function: one handler per message type, applied in order from a job's mailbox.

The commands (what people, owners and the time rules ask of a job) are here; what the worker did
is in ``worker_life``. ``BY_MESSAGE`` maps each message type to its handler (the socket's
requests have their own table, ``handlers.HANDLERS``).
"""

from __future__ import annotations

from typing import Any, Callable

from roost.bounds import LAST_TEXT_MAX, cut, labels_problem
from roost.daemon.engine import adopt, approvals, limits, stall_watch
from roost.daemon.engine import attach as presence
from roost.daemon.engine import messages as m
from roost.daemon.engine import reports, spend
from roost.daemon.engine.spawn import on_spawn
from roost.daemon.engine import turns as t
from roost.daemon.git import worktrees
from roost.daemon.engine import worker_events as w
from roost.daemon.engine.run_queue import Placed
from roost.daemon.engine.slot import Phase, stoppable
from roost.daemon.engine.ports import EngineApi
from roost.models import STOPPABLE_STATES, Job, State
from roost.protocol import ErrorCode, ProtocolError
from roost.rules.budgets import stop_reason as budget_stop
from roost.rules.lifecycle import auto_close_due, hold_due, reap_due, report_action



def on_start(eng: EngineApi, job: Job, msg: m.Start) -> None:
    """The run queue let a queued spawn go: it keeps its place under the cap until its worker is
    ready or gone (or its host turns out to be full: then it waits there, and the place is free)."""
    if (job.state != State.QUEUED or job.archived_at is not None
            or w.begin_start(eng, job) is not Placed.STARTED):
        eng.queue.releasing.pop(job.id, None)
        eng.pump()


def on_send(eng: EngineApi, job: Job, msg: m.Send) -> None:
    if job.archived_at is not None:
        raise ProtocolError(ErrorCode.ARCHIVED, f"job {job.id} is archived; it takes no messages")
    restart = job.state == State.STOPPED
    if restart and msg.caller is not None:  # only a person restarts a stopped job
        raise ProtocolError(ErrorCode.STOPPED, f"job {job.id} is stopped; a stopped job takes no messages "
                                               "from agents (a person's message restarts it)")
    if (over := spend.turn_refusal(eng, job)) is not None:  # no new turn past the cap, from anyone
        raise ProtocolError(ErrorCode.REFUSED, f"message to job {job.id} {over}")
    if job.approvals:  # not an answer: it denies what is pending, its text the reason the agent hears
        msg.answer({"outcome": "denied", "job": job.id,
                    "approvals": approvals.deny_for_message(eng, job, msg.text, msg.caller)})
        return
    if restart:
        eng.set_state(job, State.IDLE, "restart", note="restarted by a person's message")
        msg.restarted = True
    eng.add_message(job.id, msg.text)
    eng.timeline(job, "message", text=msg.text, by=msg.caller or "person")
    if msg.caller is None:  # a person's message tries a rate-limited job again now
        limits.lift(eng, job, eng.slots.get(job.id), "a person's message")
    if restart:  # the record says so too, not only memory (a restart before its next save kept it stopped)
        eng.save(job)
    eng.changed([job.id])
    slot = eng.slots.get(job.id)
    if job.state == State.QUEUED or (slot is not None and (slot.phase is Phase.STARTING or slot.turn is not None)):
        msg.answer({"outcome": "queued", "job": job.id})
    elif slot is not None and slot.phase is Phase.CLOSING:  # it goes once the closing worker is gone
        slot.reopen = True
        if msg.reply is not None:
            slot.resume_replies.append(msg.reply)
    elif slot is not None:
        if t.deliver_next(eng, job):
            turn = eng.slots[job.id].turn
            assert turn is not None
            turn.reply = msg.reply
        else:
            msg.answer({"outcome": "queued", "job": job.id})
    elif (placed := w.begin_start(eng, job)) is Placed.STARTED:
        if msg.reply is not None:
            eng.slots[job.id].resume_replies.append(msg.reply)
    elif placed is Placed.WAITING:
        msg.answer({"outcome": "queued", "job": job.id})
    else:  # refused, not raised: raising would undo the message and the failure this handler recorded
        msg.fail(ProtocolError(ErrorCode.REFUSED, f"job {job.id} could not be resumed: {eng.last_error(job)}; "
                                                  "the message is kept for its next resume"))


def on_stop(eng: EngineApi, job: Job, msg: m.Stop) -> None:
    """Answers how many of the agent's own subagents the stop ends; None when it was not stoppable.
    A budget's stop stops an idle job too: the turn that crossed the cap may have ended already."""
    slot = eng.slots.get(job.id)
    if not stoppable(job, slot) and not (budget_stop(msg.caller) and job.state is State.IDLE and job.archived_at is None):
        msg.answer(None)
        return
    ended = job.provider_running
    reason = budget_stop(msg.caller) or (f"stopped by job {msg.caller}" if msg.caller else "stopped by a person")
    denials = approvals.deny_all(eng, job, "a stop", reason)
    eng.set_state(job, State.STOPPED, "stop", by=msg.caller or "person", reason=reason)
    eng.drop_messages(job.id)
    eng.save(job)
    if slot is not None:
        t.cut(slot, "stop", msg.caller or "person")
        t.abort(eng, job, slot, bounded=True, first=denials)
    eng.recheck_parent(job)
    eng.pump()
    msg.answer(ended)


def on_close(eng: EngineApi, job: Job, msg: m.Close) -> None:
    slot = eng.slots.get(job.id)
    if slot is None:
        msg.answer({"closed": False, "reason": "no worker is running"})
        return
    if slot.turn is not None and slot.turn.ending is None:  # a stopped turn is being cut anyway
        raise ProtocolError(ErrorCode.REFUSED, f"job {job.id} is in a turn; stop it first or wait")
    if slot.phase is Phase.STARTING:
        raise ProtocolError(ErrorCode.REFUSED, f"job {job.id} is starting; wait for it to be ready")
    if msg.reply is not None:
        slot.close_replies.append(msg.reply)
    # what its agent waits on (a background subagent's request) is denied first
    denials = approvals.deny_all(eng, job, "a close", msg.reason, restore=True)
    eng.save(job)
    w.close_worker(eng, job, slot, msg.reason, first=denials)


def on_pin(eng: EngineApi, job: Job, msg: m.Pin) -> None:
    job.pinned = msg.pinned
    eng.timeline(job, "pinned" if msg.pinned else "unpinned")
    eng.save(job)
    msg.answer(None)


def on_seen(eng: EngineApi, job: Job, msg: m.Seen) -> None:
    if job.unseen:
        job.unseen = False
        eng.save(job)
    msg.answer(None)


def on_label(eng: EngineApi, job: Job, msg: m.Label) -> None:
    labels = dict(job.labels)
    if msg.value is None:
        labels.pop(msg.key, None)
    else:
        labels[msg.key] = msg.value
        if problem := labels_problem(labels):  # here, in the job's order, so two labels at once cannot pass it
            raise ProtocolError(ErrorCode.BAD_ARGS, f"label: job {job.id} would have {problem}")
    job.labels = labels
    eng.save(job)
    msg.answer(None)


def on_report(eng: EngineApi, job: Job, msg: m.Report) -> None:
    slot = eng.slots.get(job.id)
    eng.timeline(job, "report", status=msg.status, text=msg.text)
    if msg.text:
        job.last_text = cut(msg.text, LAST_TEXT_MAX)
    eng.save(job)
    if slot is not None and slot.turn is not None:
        slot.turn.report = (msg.status, msg.text)
        msg.answer({"recorded": True, "applies": "at the end of this turn"})
        return
    # Outside a turn (a shell tool after the fact): it takes effect at once.
    new = t.REPORT_STATES.get(msg.status, State.IDLE)
    if job.state != State.STOPPED:
        eng.set_state(job, new, "report")
        eng.save(job)
        if new == State.DONE and slot is not None:
            slot.done_at = eng.monotonic()
        reports.route(eng, job, new, msg.text or job.last_text)
    msg.answer({"recorded": True, "applies": "now"})


def on_archive(eng: EngineApi, job: Job, msg: m.Archive) -> None:
    now = eng.clock()
    denials = approvals.deny_all(eng, job, "the archive", "archived")
    job.archived_at = now
    if job.state in STOPPABLE_STATES:
        eng.set_state(job, State.STOPPED, "archive", reason="archived")
    eng.drop_messages(job.id)
    eng.store.mark_reports([r["id"] for r in eng.store.pending_reports(job.id)], now)
    eng.timeline(job, "archived")
    eng.save(job)
    slot = eng.slots.get(job.id)
    if slot is not None:  # the denials, then the abort, then the close: in that order at the worker
        t.cut(slot, "archive", "person")
        w.close_worker(eng, job, slot, "archived", bounded=True, first=t.abort_effect(eng, job, slot, denials))
    worktrees.after_archive(eng, job)
    eng.recheck_parent(job)
    eng.pump()
    msg.answer(job.id)


def on_detach(eng: EngineApi, job: Job, msg: m.Detach) -> None:
    """Make a job a root; a job's detach (an ancestor's: the authority table lets no job detach
    itself) is refused while the target is under one of its ancestors' budgets."""
    if msg.caller is not None and (why := spend.detach_refusal(eng, job)) is not None:
        raise ProtocolError(ErrorCode.REFUSED, f"detach refused: {why}")
    if job.parent is not None:
        old_parent = job.parent
        _make_root(eng, job)
        eng.save(job)
        if old_parent in eng.slots:
            eng.post(old_parent, m.Due())
    msg.answer(None)


def _make_root(eng: EngineApi, job: Job) -> None:
    """Detach a job from its parent (inside a transaction): its subtree's depths follow."""
    eng.timeline(job, "detached", parent=job.parent)
    old_parent = job.parent
    moved = eng.index.reparent(job, None)
    eng.journal.undo(lambda: eng.index.reparent(job, old_parent))
    for job_id in moved:
        member = eng.index.get(job_id)
        if member is not None:
            eng.store.save_job(member)
    eng.changed(moved)


def on_rename(eng: EngineApi, job: Job, msg: m.Rename) -> None:
    eng.timeline(job, "renamed", old=job.title, title=msg.title)
    job.title = msg.title
    eng.save(job)
    msg.answer(None)


def on_unarchive(eng: EngineApi, job: Job, msg: m.Unarchive) -> None:
    if job.archived_at is None:
        msg.answer(None)
        return
    job.archived_at = None
    eng.timeline(job, "unarchived")
    if msg.detach and job.parent is not None:
        _make_root(eng, job)
    eng.save(job)
    msg.answer(None)


def on_resume(eng: EngineApi, job: Job, msg: m.Resume) -> None:
    if (job.id in eng.slots or job.archived_at is not None or job.state in (State.STOPPED, State.QUEUED)
            or w.begin_start(eng, job) is not Placed.STARTED):
        eng.queue.releasing.pop(job.id, None)  # let go by its host's queue, it no longer needs the place
    msg.answer(None)


def on_reports(eng: EngineApi, job: Job, msg: m.Reports) -> None:
    """Children's reports wait for this job: what the rule says to do with them, now."""
    pending = eng.store.pending_reports(job.id)
    if not pending or spend.turn_refusal(eng, job) is not None:  # past the cap they wait for a raise
        return
    facts = eng.facts(job)
    question = any(r["question"] for r in pending)
    slot = eng.slots.get(job.id)
    held = slot.held_since if slot is not None else None
    action = report_action(job, facts, question, held, eng.config, eng.monotonic())
    if action == "drop":
        eng.store.mark_reports([r["id"] for r in pending], eng.clock())
    elif action == "deliver":
        t.deliver_next(eng, job)
    elif action == "wake":
        w.begin_start(eng, job)
    elif action == "steer" and slot is not None:
        t.steer(eng, job, slot)
    elif action == "hold" and slot is not None and slot.held_since is None:
        slot.held_since = eng.monotonic()


def on_ended_at_start(eng: EngineApi, job: Job, msg: m.EndedAtStart) -> None:
    """Recovery ended the job's turn: its parent's outbox has it like any failed or stopped turn's."""
    reports.route(eng, job, job.state, eng.last_error(job) if job.state == State.FAILED else job.reason)


def on_due(eng: EngineApi, job: Job, msg: m.Due) -> None:
    """A deadline passed or an input of the time rules changed: close, reap or steer if due."""
    slot = eng.slots.get(job.id)
    if slot is None or slot.phase is Phase.CLOSING:
        return
    if slot.restart_for_cap and slot.turn is None and not job.provider_running and not job.approvals:
        slot.reopen = bool(eng.inbox[job.id])  # a message that waited for it goes to the new worker
        w.close_worker(eng, job, slot, "its budget changed: its agent starts again with the new cap")
        return
    facts, kids, config, now = eng.facts(job), eng.index.kids(job.id), eng.config, eng.monotonic()
    approvals.expire(eng, job, slot, now)
    if stall_watch.on_due(eng, job, slot):  # over max_turn_time: failed, now cut short
        t.cut(slot, "over-time", "daemon")
        t.abort(eng, job, slot)
    elif limits.on_due(eng, job, slot):
        t.deliver_next(eng, job)
    elif auto_close_due(job, facts, kids, config, now):
        w.close_worker(eng, job, slot, "done: subagent auto-close")
        if job.parent:
            eng.changed([job.parent])
    elif reap_due(job, facts, kids, config, now):
        w.close_worker(eng, job, slot, f"idle for {config.idle_timeout:g}s")
    elif hold_due(facts, config, now):
        t.steer(eng, job, slot)


BY_MESSAGE: dict[type, Callable[[EngineApi, Job, Any], None]] = {
    m.Start: on_start, m.Send: on_send, m.Stop: on_stop, m.Close: on_close, m.Pin: on_pin, m.Seen: on_seen, m.Label: on_label,
    m.Report: on_report, m.Archive: on_archive, m.Detach: on_detach, m.Resume: on_resume, m.Rename: on_rename,
    m.Unarchive: on_unarchive, m.SetBudget: spend.on_set_budget,
    m.Reports: on_reports, m.Due: on_due, m.EndedAtStart: on_ended_at_start,
    m.Evict: w.on_evict, m.Spawned: w.on_spawned, m.StartFailed: w.on_start_failed, m.Ready: w.on_ready, m.NotReady: w.on_not_ready,
    m.PromptAnswer: t.on_prompt_answer, m.SteerAnswer: t.on_steer_answer, m.AbortAnswer: t.on_abort_answer,
    m.Event: t.on_event, m.Exited: w.on_exited, m.Adopt: adopt.on_adopt, m.Resynced: adopt.on_resynced,
    m.AnswerApproval: approvals.on_answer, m.AnswerNotTaken: approvals.on_answer_not_taken,
    m.Spawn: on_spawn, m.Attach: presence.on_attach, m.Release: presence.on_release, m.Shutdown: w.on_shutdown,
    m.Settled: worktrees.on_settled, m.Restored: worktrees.on_restored,
}
