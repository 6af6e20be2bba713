"""Stalls in the engine: what the stall rules (roost/rules/stalls.py) read of a job's turn, kept on
its slot as events come, and what the job's deadline does when one of their bounds passes: a flag
on the row (``stalled``, ``not_started``; it clears at the next event) or, past ``max_turn_time``, the
turn failed and aborted, saying so. docs/lifecycle.md#stalls says the rules."""

from __future__ import annotations

from roost.daemon.engine import reports
from roost.daemon.engine.ports import EngineApi
from roost.daemon.engine.slot import Slot
from roost.models import Job, State
from roost.rules.stalls import OVER_TIME, StallConfig, TurnFacts, stall


def facts(job: Job, slot: Slot) -> TurnFacts:
    """What the rules read: the turn's start, the prompt not taken yet, the agent's last event."""
    return TurnFacts(job.state, last_event_at=slot.last_event_at, last_event=slot.last_event,
                     turn_started_at=slot.turn_started_at, accepted_at=slot.accepted_at)


def due(job: Job, slot: Slot, config: StallConfig, now: float) -> float | None:
    """When a stall bound of the job's turn passes next (None: none ahead), for its timer."""
    return stall(facts(job, slot), config, now).due


def prompt_given(slot: Slot, now: float) -> None:
    """A prompt went to the worker: the start bound counts from now, until the worker takes it."""
    slot.accepted_at, slot.turn_started_at, slot.last_event_at = now, None, None


def turn_began(eng: EngineApi, job: Job, slot: Slot) -> None:
    """The worker took the prompt, or the agent began a turn of its own: the turn bounds count from
    now, and a ``not_started`` flag clears."""
    slot.accepted_at, slot.turn_started_at, slot.last_event_at = None, eng.monotonic(), None
    _flag(eng, job, "", "")


def turn_over(eng: EngineApi, job: Job, slot: Slot) -> None:
    """No turn runs any more (it ended, or its prompt was refused): nothing to watch, no flag."""
    slot.accepted_at = slot.turn_started_at = slot.last_event_at = None
    _flag(eng, job, "", "")


def heard(eng: EngineApi, job: Job, slot: Slot, kind: str) -> None:
    """The agent said something: the silence bound counts from now, and a stall flag clears."""
    slot.last_event_at, slot.last_event = eng.monotonic(), kind
    if job.stall == "stalled":
        _flag(eng, job, "", "")


def on_due(eng: EngineApi, job: Job, slot: Slot) -> bool:
    """A stall bound may have passed: flag the row; True when the turn ran over ``max_turn_time``
    and was failed, saying so (the caller cuts it short and aborts it)."""
    if slot.turn is None and slot.accepted_at is None:
        return False
    verdict = stall(facts(job, slot), eng.config, eng.monotonic())
    if verdict.flag == OVER_TIME:
        if slot.turn is None or slot.turn.ending is not None:
            return False
        reason = f"{verdict.words}: roost aborted it"
        _flag(eng, job, "", "")
        eng.set_state(job, State.FAILED, "failure", reason=reason)
        eng.timeline(job, "error", message=reason)
        eng.save(job)
        reports.route(eng, job, State.FAILED, reason)
        return True
    if verdict.flag is not None and verdict.flag != job.stall:
        eng.timeline(job, "stall", flag=verdict.flag, words=verdict.words)
    _flag(eng, job, verdict.flag or "", verdict.words)
    return False


def _flag(eng: EngineApi, job: Job, flag: str, words: str) -> None:
    if (job.stall, job.stall_words) != (flag, words):
        job.stall, job.stall_words = flag, words
        eng.save(job)
