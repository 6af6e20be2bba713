"""The stall rules (roost/rules/stalls.py) as pure functions, with the clock passed in."""

from __future__ import annotations

import pytest

from roost.config import Config, ConfigError, parse_config
from roost.models import State
from roost.rules.stalls import NOT_STARTED, OVER_TIME, STALLED, Stall, TurnFacts, stall

CFG = Config(stall_after=300, max_turn_time=0, start_stall_after=60)
TIMED = Config(stall_after=300, max_turn_time=900, start_stall_after=60)
WORKING = TurnFacts(State.WORKING, last_event_at=1000.0, last_event="text", turn_started_at=900.0)


def test_a_working_job_is_due_at_its_stall_bound_and_flagged_at_it_not_before():
    assert stall(WORKING, CFG, 1299.0) == Stall(due=1300.0)
    at = stall(WORKING, CFG, 1300.0)
    assert at.flag == STALLED and at.due is None
    assert at.words == "stalled: nothing from the agent for 5m (last: text, stall_after = 300s)"
    assert stall(WORKING, CFG, 1300.0 + 3600).words.startswith("stalled: nothing from the agent for 1h ")


def test_an_event_moves_the_bound_and_a_turn_with_no_event_counts_from_its_start():
    later = TurnFacts(State.WORKING, last_event_at=1250.0, last_event="retrying", turn_started_at=900.0)
    assert stall(later, CFG, 1300.0) == Stall(due=1550.0)
    silent = TurnFacts(State.WORKING, turn_started_at=900.0)
    assert stall(silent, CFG, 1199.9).flag is None
    assert stall(silent, CFG, 1200.0).words == "stalled: nothing from the agent for 5m (stall_after = 300s)"


@pytest.mark.parametrize("state", [State.IDLE, State.WAITING, State.DONE, State.FAILED, State.STOPPED, State.QUEUED])
def test_only_a_working_job_stalls(state):
    facts = TurnFacts(state, last_event_at=0.0, turn_started_at=0.0)
    assert stall(facts, TIMED, 10_000.0) == Stall()


def test_max_turn_time_is_off_by_default_and_wins_over_a_stall_once_passed():
    assert Config().max_turn_time == 0 and Config().stall_after == 300
    assert stall(WORKING, TIMED, 1300.0).flag == STALLED and stall(WORKING, TIMED, 1300.0).due == 1800.0
    over = stall(WORKING, TIMED, 1800.0)
    assert over.flag == OVER_TIME and over.due is None
    assert over.words == "the turn has run 15m, over max_turn_time = 900s"
    assert stall(WORKING, TIMED, 1799.0).flag == STALLED


def test_a_message_taken_and_not_started_is_flagged_after_its_bound():
    waiting = TurnFacts(State.IDLE, accepted_at=500.0)
    assert stall(waiting, CFG, 559.0) == Stall(due=560.0)
    flagged = stall(waiting, CFG, 560.0)
    assert flagged.flag == NOT_STARTED and flagged.due is None
    assert flagged.words == "a message waits to start: taken 1m ago, no turn began (start_stall_after = 60s)"
    behind = TurnFacts(State.WORKING, last_event_at=1000.0, turn_started_at=900.0, accepted_at=1100.0)
    assert stall(behind, CFG, 1150.0).due == 1160.0, "the earliest bound ahead is due"
    assert stall(behind, CFG, 1160.0).flag == NOT_STARTED and stall(behind, CFG, 1160.0).due == 1300.0


def test_each_bound_at_zero_is_off():
    off = Config(stall_after=0, max_turn_time=0, start_stall_after=0)
    facts = TurnFacts(State.WORKING, last_event_at=0.0, turn_started_at=0.0, accepted_at=0.0)
    assert stall(facts, off, 1e9) == Stall()


def test_a_clock_before_the_last_event_never_flags_or_prints_nonsense():
    early = stall(WORKING, TIMED, 500.0)
    assert early.flag is None and early.due == 1300.0


@pytest.mark.parametrize("key", ["stall_after", "max_turn_time", "start_stall_after"])
def test_the_stall_keys_are_seconds_and_bad_ones_are_refused_naming_the_key(key):
    assert getattr(parse_config(f"{key} = 42", "roost.toml"), key) == 42
    for bad in ("-1", '"ten"', "true"):
        with pytest.raises(ConfigError) as info:
            parse_config(f"{key} = {bad}", "roost.toml")
        assert (info.value.file, info.value.key) == ("roost.toml", key)
