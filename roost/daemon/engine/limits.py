"""Rate limits: a turn the provider bounced with a usage limit or a 429 leaves its job
``rate_limited`` (not failed), its message put back to wait for the reset, and the job's deadline
timer resumes it then; the agent's own retries show on its row as a notice. Other jobs on the same
account (``account``: the same driver profile on the same host) start no new turn until that reset,
so they do not burn their retries on a limit already known.

docs/lifecycle.md#rate-limited says the rules; the worker events are docs/protocols.md's ``limited``
and ``retrying``. Each handler is called from the engine's turn handlers (roost/daemon/engine/turns.py).
"""

from __future__ import annotations

import time
from typing import Any

from roost.daemon.engine.ports import EngineApi
from roost.daemon.engine.slot import Hold, Slot, Turn
from roost.drivers.limits import is_limit
from roost.models import Job, State
from roost.text import plain_words

#: How much of an agent's limit or retry words the record keeps.
LIMIT_WORDS_MAX = 300
#: With no reset time from the agent: wait BACKOFF_FIRST seconds, doubled after each bounce in a
#: row, at most BACKOFF_MAX (docs/lifecycle.md#rate-limited).
BACKOFF_FIRST = 60.0
BACKOFF_MAX = 900.0
#: The latest reset the daemon believes (an agent's "try again at" a day away is taken as given).
UNTIL_MAX = 86400.0


def account(job: Job) -> str:
    """Which provider account a job's calls go to: its driver profile on its host (one profile is one
    set of credentials; two profiles with one key are two accounts to roost)."""
    return f"{job.driver}@{job.host}" if job.host else job.driver


def backoff(bounces: int) -> float:
    """Seconds to wait after the ``bounces``-th bounce in a row (1, 2, …) when the agent gave no reset."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, bounces - 1))


def _words(value: Any) -> str:
    return plain_words(str(value or ""), LIMIT_WORDS_MAX)


def _until(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    return float(value) if ok else None


def on_limited(eng: EngineApi, job: Job, slot: Slot, event: dict[str, Any]) -> None:
    """A ``limited`` event: on the timeline; while the agent retries by itself its words are the row's
    notice (the job stays working); a final one is kept for the turn's end, which it bounces."""
    words, until = _words(event.get("words")), _until(event.get("until"))
    retrying = bool(event.get("retrying"))
    eng.timeline(job, "limited", words=words, retrying=retrying,
                 **({"until": until} if until is not None else {}))
    if retrying:
        notify(eng, job, words)
    elif slot.turn is not None:
        slot.turn.limit = (words, until)


def on_retrying(eng: EngineApi, job: Job, event: dict[str, Any]) -> None:
    """A ``retrying`` event: its own timeline entry, and its words on the row until the next real event."""
    words = _words(event.get("words"))
    data = {k: event[k] for k in ("attempt", "of", "delay") if isinstance(event.get(k), (int, float))}
    eng.timeline(job, "retrying", words=words, **data)
    notify(eng, job, words)


def notify(eng: EngineApi, job: Job, words: str) -> None:
    """Set the row's notice (what the agent says it does about a failed call)."""
    if job.notice != words:
        job.notice = words
        eng.save(job)


def clear_notice(eng: EngineApi, job: Job) -> None:
    """A real event came (text, a tool, the turn's end): the agent is past its retry."""
    if job.notice:
        job.notice = ""
        eng.save(job)


def bounced(eng: EngineApi, job: Job, slot: Slot, turn: Turn, error: str) -> bool:
    """Whether the failed turn was bounced by a limit (a final ``limited`` event in it, or an error
    that says so). If it was: its message or reports go back to wait, and the job is ``rate_limited``
    until the reset (the agent's, else the back-off), its deadline timer armed for it."""
    limit = turn.limit
    if limit is None and not is_limit(error):
        return False
    words, until = limit if limit is not None else (_words(error), None)
    if turn.kind == "prompt":
        eng.put_back_message(job.id, turn.ids[0])
    elif turn.kind == "reports":
        eng.store.undeliver_reports(turn.ids)
    slot.bounces += 1
    now = eng.clock()
    wait = min(UNTIL_MAX, until - now) if until is not None else backoff(slot.bounces)
    wait = max(0.0, wait)
    slot.limit_at = eng.monotonic() + wait
    job.limited_until, job.limited_words, job.notice = now + wait, words, ""
    _hold_account(eng, job, Hold(slot.limit_at, now + wait, job.id))
    eng.set_state(job, State.RATE_LIMITED, "rate-limited", until=now + wait, words=words,
                  **({} if until is not None else {"backoff": wait}))
    eng.timeline(job, "turn_end", outcome="failed", error=error, note="rate limited")
    return True


def _hold_account(eng: EngineApi, job: Job, hold: Hold) -> None:
    key = account(job)
    old = eng.accounts.get(key)
    if old is not None and old.at >= hold.at:
        return
    eng.accounts[key] = hold
    eng.journal.undo(lambda: _put(eng.accounts, key, old))


def _put(accounts: dict[str, Hold], key: str, hold: Hold | None) -> None:
    if hold is None:
        accounts.pop(key, None)
    else:
        accounts[key] = hold


def account_hold(eng: EngineApi, job: Job, now: float) -> Hold | None:
    """The limit another job met on this job's account that has not reset yet (``now``: monotonic)."""
    hold = eng.accounts.get(account(job))
    if hold is None or hold.job == job.id:
        return None
    if now >= hold.at:
        return None
    return hold


def held(eng: EngineApi, job: Job, slot: Slot, now: float) -> bool:
    """Whether the job's next turn still waits: for its own limit's reset (or a person, with
    ``on_rate_limit = "ask"``), or for the reset of a limit another job met on its account (its row
    says so). ``now``: the monotonic clock."""
    if job.state == State.RATE_LIMITED:
        return slot.asked or (slot.limit_at is not None and now < slot.limit_at)
    hold = account_hold(eng, job, now)
    if hold is None:
        return False
    slot.account_wait = hold.at
    notify(eng, job, f"waits for the rate limit on {account(job)} to reset at "
                     f"{time.strftime('%H:%M:%S', time.localtime(hold.until))} (met by job {hold.job})")
    return True


def limit_at(job: Job, slot: Slot) -> float | None:
    """When a limit that holds the job's next turn resets (its own, or its account's), for its timer."""
    return slot.limit_at if job.state == State.RATE_LIMITED else slot.account_wait


def lift(eng: EngineApi, job: Job, slot: Slot | None, why: str) -> None:
    """Let a rate-limited job try again now (the reset came, a person's message or ``roost resume``):
    its next turn may start; the record keeps the state until it does."""
    if job.state != State.RATE_LIMITED or job.limited_until is None and (slot is None or not slot.asked):
        return
    job.limited_until = None  # a worker started for it later does not wait either
    eng.save(job)
    if slot is not None:
        slot.limit_at, slot.asked = None, False
    eng.timeline(job, "note", message=f"rate limit: trying again ({why})")


def restore(eng: EngineApi, job: Job, slot: Slot) -> None:
    """A new worker for a rate-limited job (the daemon restarted, the worker was opened again): its
    turn still waits for the reset the record keeps."""
    if job.state == State.RATE_LIMITED and job.limited_until is not None and slot.limit_at is None:
        slot.limit_at = eng.monotonic() + max(0.0, job.limited_until - eng.clock())


def on_due(eng: EngineApi, job: Job, slot: Slot) -> bool:
    """The reset came: with ``on_rate_limit = "resume"`` the bounced turn goes again (True: the caller
    hands the next prompt over); with ``"ask"`` the job waits, rate limited, for a person. A job held
    for its account's limit goes on (True) once that has reset."""
    if slot.account_wait is not None and job.state != State.RATE_LIMITED:
        if eng.monotonic() < slot.account_wait:
            return False
        slot.account_wait = None
        clear_notice(eng, job)
        return True
    if job.state != State.RATE_LIMITED or slot.limit_at is None or eng.monotonic() < slot.limit_at:
        return False
    if eng.config.on_rate_limit == "ask":
        slot.limit_at, slot.asked, job.limited_until = None, True, None
        eng.save(job)
        eng.timeline(job, "note", message="the rate limit has reset; on_rate_limit = \"ask\": a message "
                                          "or roost resume tries again")
        return False
    lift(eng, job, slot, "the limit has reset")
    return True


def settled(eng: EngineApi, job: Job, slot: Slot) -> None:
    """Its next turn begins: no limit holds it any more (leaving the state clears the record's words)."""
    slot.limit_at, slot.asked = None, False
    if slot.account_wait is not None:
        slot.account_wait = None
        clear_notice(eng, job)
