"""When a screen's timer next has something to draw (roost/rules/ticks.py), checked against
``format_age`` itself: just before the change the text is the old one, at it the new."""

from __future__ import annotations

import math

import pytest

from roost.models import Job, Row, State
from roost.rules.row_text import format_age
from roost.rules.ticks import age_changes_in, next_age_change, next_lifetime_end

NOW = 1_000_000.0


def row(state: State, created_ago: float, changed_ago: float = 0.0) -> Row:
    return Row(Job(id="j", title="j", driver="builtin", cwd="/tmp", state=state, state_since=NOW - changed_ago,
                   created_at=NOW - created_ago))


@pytest.mark.parametrize("age", [-5.0, 0.0, 0.4, 1.0, 59.2, 60.0, 61.5, 3599.0, 3600.0, 7300.5, 86399.9, 90000.0])
def test_the_age_text_changes_exactly_when_predicted(age):
    wait = age_changes_in(age)
    assert wait > 0
    assert format_age(age + wait - 1e-6) == format_age(age)
    assert format_age(age + wait) != format_age(age)


def test_an_age_that_is_not_a_number_never_changes():
    assert age_changes_in(math.nan) == math.inf and age_changes_in(math.inf) == math.inf


def test_finished_rows_never_tick_and_the_soonest_live_one_wins():
    assert next_age_change([row(State.DONE, 5, 1), row(State.FAILED, 5, 1), row(State.STOPPED, 5, 1)], NOW) is None
    assert next_age_change([], NOW) is None
    rows = [row(State.IDLE, 130.0), row(State.WORKING, 10.25), row(State.DONE, 3.5, 1)]
    assert next_age_change(rows, NOW) == pytest.approx(0.75)
    assert next_age_change([row(State.IDLE, 130.0)], NOW) == pytest.approx(50.0)


def test_a_lifetime_ends_for_rows_that_changed_recently_only():
    assert next_lifetime_end([row(State.DONE, 100, 31)], NOW, 30) is None
    assert next_lifetime_end([row(State.DONE, 100, 12), row(State.FAILED, 100, 25)], NOW, 30) == pytest.approx(5)
    assert next_lifetime_end([row(State.WORKING, 100, -1)], NOW, 30) is None, "a stamp from the future waits"
