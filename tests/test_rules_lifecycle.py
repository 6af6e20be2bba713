"""The daemon's lifecycle rules as pure functions, with the clock passed in."""

from __future__ import annotations

from dataclasses import replace

import pytest

from roost.config import Config
from roost.models import Job, State
from roost.rules.lifecycle import (WorkerFacts, auto_close_due, close_blocker, hold_due, hold_expired, reap_due,
                                   report_action)

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60)
UP = WorkerFacts(up=True, idle_since=0.0)


def job(state: State = State.IDLE, parent: str | None = "p", **kw) -> Job:
    return Job(id="c", title="t", driver="builtin", cwd="/", state=state, parent=parent, **kw)


@pytest.mark.parametrize("facts, pinned, expected", [
    (WorkerFacts(), False, "no worker"),
    (UP, True, "pinned"),
    (replace(UP, attached=True), False, "attached"),
    (replace(UP, in_turn=True), False, "a turn is running"),
    (replace(UP, busy=True), False, "starting or stopping"),
    (replace(UP, queued=1), False, "messages are queued"),
    (UP, False, None),
])
def test_what_holds_a_worker_open(facts, pinned, expected):
    assert close_blocker(job(pinned=pinned), facts, []) == expected


def test_a_running_child_holds_its_parent_but_an_archived_one_does_not():
    assert close_blocker(job(), UP, [job(State.WORKING)]) == "a child is still running"
    assert close_blocker(job(), UP, [job(State.WORKING, archived_at=1.0)]) is None


def test_the_reaper_waits_for_idle_timeout_and_is_off_at_zero():
    assert not reap_due(job(), UP, [], CFG, now=99.9)
    assert reap_due(job(), UP, [], CFG, now=100)
    assert not reap_due(job(), UP, [], replace(CFG, idle_timeout=0), now=10_000)


@pytest.mark.parametrize("lifetime", ["workflow", "session"])
def test_a_kept_child_is_reaped_only_once_its_owner_is_gone(lifetime):
    kept = job(lifetime=lifetime)
    assert not reap_due(kept, replace(UP, owner_up=True), [], CFG, now=1000)
    assert reap_due(kept, UP, [], CFG, now=1000)


def test_auto_close_waits_the_delay_after_the_last_report_and_half_of_it_after_done():
    done = job(State.DONE, state_since=10.0)
    facts = replace(UP, done_at=10.0, last_report_at=12.0)
    assert not auto_close_due(done, facts, [], CFG, now=15.9)
    assert auto_close_due(done, facts, [], CFG, now=16.0)
    assert not auto_close_due(done, facts, [], replace(CFG, subagent_auto_close=False), now=100)
    assert not auto_close_due(job(State.DONE, parent=None, state_since=10.0), facts, [], CFG, now=100)
    assert not auto_close_due(job(State.DONE, lifetime="session", state_since=10.0), facts, [], CFG, now=100)
    assert not auto_close_due(job(State.BLOCKED, state_since=10.0), facts, [], CFG, now=100)


def test_a_done_handback_then_idle_still_closes():
    assert auto_close_due(job(State.IDLE, state_since=20.0), replace(UP, done_at=10.0), [], CFG, now=20.0)
    assert not auto_close_due(job(State.IDLE, state_since=20.0), UP, [], CFG, now=20.0)


@pytest.mark.parametrize("parent, facts, question, oldest, now, expected", [
    (job(archived_at=1.0), UP, False, 0.0, 1.0, "drop"),
    (job(State.STOPPED), UP, False, 0.0, 1.0, "queue"),
    (job(), WorkerFacts(), False, 0.0, 1.0, "queue"),
    (job(State.FAILED), WorkerFacts(), False, 0.0, 1.0, "queue"),
    (job(), UP, False, 0.0, 1.0, "deliver"),
    (job(State.WORKING), replace(UP, in_turn=True), True, 0.0, 1.0, "steer"),
    (job(State.WORKING), replace(UP, in_turn=True), False, 0.0, 59.0, "hold"),
    (job(State.WORKING), replace(UP, in_turn=True), False, 0.0, 60.0, "steer"),
    (job(), replace(UP, busy=True), False, 0.0, 1.0, "hold"),
])
def test_what_happens_to_a_report(parent, facts, question, oldest, now, expected):
    assert report_action(parent, facts, question, oldest, CFG, now) == expected


def test_a_reaped_parent_is_woken_only_when_configured():
    assert report_action(job(), WorkerFacts(), False, 0.0, replace(CFG, wake_reaped_parent=True), 1.0) == "wake"


def test_the_agents_own_running_subagents_hold_the_reaper_until_idle_timeout_after_their_last_word():
    running = replace(UP, subagents_running=2, subagent_word_at=60.0)
    assert not reap_due(job(), running, [], CFG, now=159.9)
    assert reap_due(job(), running, [], CFG, now=160.0)  # silent for the idle timeout: taken as lost
    ended = replace(running, subagents_running=0)  # the last one ended at 60: the agent's own turn may follow
    assert not reap_due(job(), ended, [], CFG, now=159.9)
    assert reap_due(job(), ended, [], CFG, now=160.0)
    assert not reap_due(job(), running, [], replace(CFG, idle_timeout=0), now=10_000.0)


def test_a_done_child_with_its_own_subagents_running_is_auto_closed_only_once_they_end():
    done = replace(UP, done_at=0.0, last_report_at=0.0, subagents_running=1, subagent_word_at=50.0)
    assert not auto_close_due(job(State.DONE), done, [], CFG, now=149.9)
    assert auto_close_due(job(State.DONE), done, [], CFG, now=150.0)
    assert auto_close_due(job(State.DONE), replace(done, subagents_running=0, subagent_word_at=None), [], CFG, now=4.0)
    ended = replace(done, subagents_running=0)  # the last word at 50: the delay after it, for the agent's own turn
    assert not auto_close_due(job(State.DONE), ended, [], CFG, now=53.9)
    assert auto_close_due(job(State.DONE), ended, [], CFG, now=54.0)
    assert not auto_close_due(job(State.DONE), done, [], replace(CFG, idle_timeout=0), now=10_000.0)


def test_the_report_hold_runs_out_at_its_bound_and_only_during_a_turn() -> None:
    held = WorkerFacts(up=True, in_turn=True, held_since=10.0)
    bound = 10.0 + CFG.report_hold_max
    assert not hold_due(held, CFG, bound - 0.01) and hold_due(held, CFG, bound)
    assert not hold_due(replace(held, in_turn=False), CFG, bound + 100)
    assert not hold_due(replace(held, held_since=None), CFG, bound + 100)


@pytest.mark.parametrize("hold_max, held_since, now, expired", [
    (60, None, 1000.0, False),  # nothing held yet
    (60, 10.0, 69.9, False),
    (60, 10.0, 70.0, True),  # at the bound
    (60, 10.0, 500.0, True),  # past it
    (0, None, 0.0, True),  # no hold at all: steered at once
])
def test_the_report_hold_ends_once_for_the_timer_and_for_new_reports(hold_max, held_since, now, expired):
    """``hold_expired`` is the one definition: the timer's ``hold_due`` and ``report_action`` agree."""
    cfg = replace(CFG, report_hold_max=hold_max)
    in_turn = replace(UP, in_turn=True, held_since=held_since)
    assert hold_expired(held_since, cfg, now) is expired
    assert report_action(job(parent=None), in_turn, False, held_since, cfg, now) == ("steer" if expired else "hold")
    assert hold_due(in_turn, cfg, now) is (expired and held_since is not None)
