"""A job's approvals in the engine: a permission request its agent asked (the worker's
``approval`` event), decided at once by the job's policy or kept pending — the job ``waiting`` —
until a person answers it (``answer_approval``), a message denies it, its time runs out, a stop,
close or archive denies it, or its worker goes. Every decision is a timeline entry saying who
(a person, a rule, the policy, the timeout, a stop, a message), what and when.

Handlers here run inside the job's mailbox like every other; the answer to the agent is an effect
(``approval_answer`` to the worker) that runs once the decision is committed. The rules they apply
are pure, in roost/rules/approvals.py; docs/agents.md#approvals says what people see.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Coroutine

from roost.daemon.engine import messages as m
from roost.daemon.engine.slot import Slot
from roost.daemon.engine.ports import EngineApi
from roost.models import Job, State
from roost.protocol import ErrorCode, ProtocolError
from roost.rules import approvals as rules


#: Seconds the daemon waits for a worker to take an ``approval_answer`` (a stop's abort waits for the
#: denials first, so no longer than an abort's own wait).
ANSWER_TIMEOUT = 5.0
# -- asked ----------------------------------------------------------------------------------------------
def on_asked(eng: EngineApi, job: Job, slot: Slot, event: dict[str, Any]) -> None:
    """The agent asks for permission: the policy decides at once, or the approval waits for a person."""
    wid = event.get("approval")
    if not isinstance(wid, str) or not wid or len(wid) > rules.WORD_MAX:
        eng.timeline(job, "error", message="the agent asked for an approval without a usable id (a string of "
                                           f"1 to {rules.WORD_MAX} characters), so it cannot be answered: "
                                           f"{str(wid)[:rules.WORD_MAX]!r}")
        return
    if any(w == wid for w, _ in slot.approvals.values()):
        eng.timeline(job, "note", message=f"ignored a second request for the pending approval {wid!r}")
        return
    tool = rules.word(event.get("tool")) or "?"
    whole = rules.as_what(event.get("what"))  # as the agent will run it: what the policy decides on
    what = rules.bound_what(whole)  # what is kept and shown
    decision = rules.decide(job.approval_policy, job.approval_grants, tool, reached(job, whole), rules.is_whole(what))
    verdict, by, reason = decision.verdict, "policy", decision.why
    if job.state == State.STOPPED or job.archived_at is not None:
        verdict, by, reason = "deny", "a stop", "the job is stopped: nothing it asks runs"
    elif verdict == "ask" and len(job.approvals) >= rules.PENDING_MAX:
        verdict, by = "deny", "the pending limit"
        reason = f"{rules.PENDING_MAX} approvals already wait for a person: denied until they are answered"
    words = {k: v for k, limit in (("description", rules.DESCRIPTION_MAX), ("subagent", rules.WORD_MAX))
             if (v := rules.word(event.get(k), limit))}
    aid = eng.approvals.new_id()
    if verdict != "ask":
        eng.timeline(job, "approval", id=aid, tool=tool, what=what, **words, decision=verdict, by=by,
                     reason=reason)
        eng.approvals.done(aid, f"{'allowed' if verdict == 'allow' else 'denied'} by {by} ({reason})")
        eng.spawn_task(_answer(eng, job.id, slot.worker, [wid], verdict, _heard(verdict, reason)))
        return
    entry = {"id": aid, "wid": wid, "tool": tool, "what": what, **words, "asked_at": eng.clock()}
    if not job.approvals:
        job.approval_back = (State.WORKING if slot.turn is not None else job.state).value
    job.approvals = [*job.approvals, entry]
    eng.timeline(job, "approval", id=aid, asked=True, tool=tool, what=what, **words)
    eng.set_state(job, State.WAITING, "approval", approval=aid)
    eng.save(job)
    slot.approvals[aid] = (wid, eng.monotonic())
    if not rules.is_whole(what):
        slot.whole[aid] = whole
    eng.approvals.jobs[aid] = job.id


def _heard(verdict: str, why: str) -> str:
    """What the agent hears of a decision the policy made."""
    return f"allowed by roost: {why}" if verdict == "allow" else f"denied by roost: {why}"


def on_withdrawn(eng: EngineApi, job: Job, slot: Slot, event: dict[str, Any]) -> None:
    """The agent no longer waits on an approval it asked."""
    wid = event.get("approval")
    aid = next((a for a, (w, _) in slot.approvals.items() if w == wid), None)
    if aid is None:
        eng.timeline(job, "note", message=f"the agent withdrew an approval that is not pending: {str(wid)[:200]!r}")
        return
    settle(eng, job, aid, "withdrawn", "the agent", "the agent no longer waits on it")
    eng.save(job)


# -- settled --------------------------------------------------------------------------------------------
def settle(eng: EngineApi, job: Job, aid: str, decision: str, by: str, reason: str = "", rule: str | None = None,
           restore: bool = True) -> str | None:
    """Take one pending approval off the job (inside the caller's transaction), with its timeline
    entry; the job goes back to the state it had once none is pending (unless ``restore`` is off:
    the caller sets the state). Returns the worker's id for it, for the answer the caller sends."""
    entry = next((a for a in job.approvals if a["id"] == aid), None)
    if entry is None:
        return None
    slot = eng.slots.get(job.id)
    wid = slot.approvals.pop(aid, (None, 0.0))[0] if slot is not None else None
    if slot is not None:
        slot.whole.pop(aid, None)
    job.approvals = [a for a in job.approvals if a["id"] != aid]
    said = {"reason": reason} if reason else {}
    if rule is not None:
        said["rule"] = rule
    eng.timeline(job, "approval", id=aid, tool=entry["tool"], what=entry["what"], decision=decision, by=by, **said)
    verb = {"allow": "allowed", "deny": "denied"}.get(decision, decision)
    eng.approvals.done(aid, f"{verb} by {by}" + (f" ({reason})" if reason and decision == "deny" else ""))
    if not job.approvals:
        back, job.approval_back = job.approval_back, ""
        if back == State.WORKING.value and (slot is None or slot.turn is None):
            back = State.IDLE.value  # the turn it waited in is gone (a prompt the worker refused)
        target = State(back) if back else State.IDLE
        if restore and job.state == State.WAITING and target != job.state:  # not when it waits on a question still
            eng.set_state(job, target, "approval-settled", note="no approval is pending any more")
    return wid


def on_answer(eng: EngineApi, job: Job, msg: m.AnswerApproval) -> None:
    """A person's answer to one approval: allow it once, allow it and what the rule covers for the rest
    of the job, or deny it with the reason the agent hears."""
    entry = next((a for a in job.approvals if a["id"] == msg.approval), None)
    if entry is None:
        raise eng.approvals.refusal(msg.approval)
    result: dict[str, Any] = {"approval": msg.approval, "job": job.id}
    allowed: list[tuple[str, str]] = []  # (worker id, what the agent hears)
    denied: list[str] = []
    if msg.decision == "deny":
        reason = msg.reason or "denied by a person"
        wid = settle(eng, job, msg.approval, "deny", "a person", reason)
        denied += [wid] if wid else []
        result.update(decision="deny", reason=reason)
    else:
        rule = None
        if msg.decision == "job":
            try:
                rule = msg.rule or str(rules.parse_rule(
                    rules.rule_for(entry["tool"], reached(job, whole_of(eng, job, entry)))))
            except rules.RuleError as exc:
                raise ProtocolError(ErrorCode.BAD_ARGS, f"answer_approval: {exc}") from None
            if rule not in job.approval_grants:
                if len(job.approval_grants) >= rules.RULES_MAX:
                    raise ProtocolError(ErrorCode.REFUSED, f"job {job.id} has {rules.RULES_MAX} granted rules "
                                                           "already; approve this one once")
                job.approval_grants = [*job.approval_grants, rule]
            result["rule"] = rule
        wid = settle(eng, job, msg.approval, "allow", "a person", msg.reason, rule=rule)
        allowed += [(wid, msg.reason or "allowed by a person")] if wid else []
        result["decision"] = "allow"
        if rule is not None:  # what else waits and the new rule covers goes too
            for other in list(job.approvals):
                if rules.parse_rule(rule).matches(other["tool"], reached(job, whole_of(eng, job, other)),
                                                  rules.is_whole(other["what"])):
                    owid = settle(eng, job, other["id"], "allow", f"rule {rule!r} a person granted")
                    allowed += [(owid, f"allowed by rule {rule!r}")] if owid else []
    eng.save(job)
    slot = eng.slots.get(job.id)
    if slot is not None:
        for wid, heard in allowed:
            eng.spawn_task(_answer(eng, job.id, slot.worker, [wid], "allow", heard))
        if denied:
            eng.spawn_task(_answer(eng, job.id, slot.worker, denied, "deny", result["reason"]))
    msg.answer(result)


def reached(job: Job, what: dict[str, Any]) -> dict[str, Any]:
    """A request as the rules read it: on this machine, each path (one a line) as it will be reached,
    relative to the job's directory and with its symlinks resolved, so ``Edit:/repo/*`` never allows
    a link in /repo that leads out of it. A host's paths are taken as given (``..`` still out)."""
    path = what.get("path")
    if not isinstance(path, str) or job.host:
        return what
    base = job.cwd or "/"
    return {**what, "path": "\n".join(os.path.realpath(os.path.join(base, p)) for p in path.split("\n"))}


def whole_of(eng: EngineApi, job: Job, entry: dict[str, Any]) -> dict[str, Any]:
    """A pending approval's request as the agent will run it: the record's, or, when that was cut,
    the whole one the job's slot keeps."""
    slot = eng.slots.get(job.id)
    return slot.whole.get(entry["id"], entry["what"]) if slot is not None else entry["what"]


def deny_all(eng: EngineApi, job: Job, by: str, reason: str,
             restore: bool = False) -> Coroutine[Any, Any, None] | None:
    """Deny every pending approval of the job (inside the caller's transaction; the caller sets the
    state unless ``restore``) and return the effect that tells the agent, for the caller to run
    before its abort or close: so nothing sent later can release what was pending."""
    wids = [w for entry in list(job.approvals) if (w := settle(eng, job, entry["id"], "deny", by, reason,
                                                                 restore=restore))]
    slot = eng.slots.get(job.id)
    if slot is None or not wids:
        return None
    return _answer(eng, job.id, slot.worker, wids, "deny", reason)


def deny_for_message(eng: EngineApi, job: Job, text: str, caller: str | None) -> list[str]:
    """A message while approvals are pending is not an answer: it denies them, its text the reason
    the agent hears (as Claude Code's "tell it what to do instead"). Returns the ids it denied."""
    ids = [a["id"] for a in job.approvals]
    reason = rules.word(text, rules.REASON_MAX) or "denied"
    by = f"a message from job {caller}" if caller else "a person's message"
    eng.timeline(job, "message", text=text, by=caller or "person", denied=ids)
    wids = [w for aid in ids if (w := settle(eng, job, aid, "deny", by, reason))]
    eng.save(job)
    slot = eng.slots.get(job.id)
    if slot is not None and wids:
        eng.spawn_task(_answer(eng, job.id, slot.worker, wids, "deny", reason))
    return ids


def expire(eng: EngineApi, job: Job, slot: Slot, now: float) -> None:
    """Deny what nobody answered within ``approval_timeout``, saying so."""
    timeout = eng.config.approval_timeout
    ids = rules.timed_out({aid: asked for aid, (_, asked) in slot.approvals.items()}, timeout, now)
    if not ids:
        return
    reason = f"nobody answered within approval_timeout = {timeout:g}s, so roost denied it"
    wids = [w for aid in ids if (w := settle(eng, job, aid, "deny", "the timeout", reason))]
    eng.save(job)
    if wids:
        eng.spawn_task(_answer(eng, job.id, slot.worker, wids, "deny", reason))


def gone(eng: EngineApi, job: Job, why: str) -> None:
    """The worker that asked is gone (inside the caller's transaction): its approvals are settled as
    such, and the job goes back to the state it had."""
    for entry in list(job.approvals):
        settle(eng, job, entry["id"], "gone", "the worker's end", why)


def tell_denied(eng: EngineApi, job: Job, slot: Slot, reason: str) -> Coroutine[Any, Any, None] | None:
    """The effect that denies, at the agent, everything pending, leaving the record to the worker's
    exit (a shutdown: they are settled as gone with it)."""
    wids = [wid for wid, _ in slot.approvals.values()]
    return _answer(eng, job.id, slot.worker, wids, "deny", reason) if wids else None


# -- telling the agent ------------------------------------------------------------------------------------
async def _answer(eng: EngineApi, job_id: str, worker: Any, wids: list[str], decision: str, reason: str) -> None:
    """Send ``approval_answer`` for each of the worker's approvals, all at once (written in this
    order, before anything a later task sends); one it does not take is noted."""
    await asyncio.gather(*(_answer_one(eng, job_id, worker, wid, decision, reason) for wid in wids))


async def _answer_one(eng: EngineApi, job_id: str, worker: Any, wid: str, decision: str, reason: str) -> None:
    try:
        resp = await worker.request("approval_answer", timeout=ANSWER_TIMEOUT, approval=wid, decision=decision,
                                    reason=reason)
        ok, error = bool(resp.get("success")), str(resp.get("error") or "")
    except (asyncio.TimeoutError, ConnectionError) as exc:
        ok, error = False, f"the worker did not take it: {exc or 'timeout'}"
    if not ok:
        eng.post(job_id, m.AnswerNotTaken(worker, wid, decision, error or "refused"))


def on_answer_not_taken(eng: EngineApi, job: Job, msg: m.AnswerNotTaken) -> None:
    eng.timeline(job, "note", message=f"the agent did not take the answer ({msg.decision}) to its approval "
                                      f"{msg.approval!r}: {msg.error}")
