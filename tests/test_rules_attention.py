"""Which rows need a person, the order the jump key visits them, and when the app may notify."""

from __future__ import annotations

from roost.models import Job, Row, State
from roost.rules.attention import Attention, attention_kind, may_notify, next_attention, unseen_mark
from roost.rules.views import filter_matches, parse_filter


def mk(id: str, state: State = State.WORKING, *, unseen: bool = False, approvals: int = 0) -> Row:
    asks = [{"id": f"{id}-a{i}", "tool": "shell", "what": {}, "asked_at": 0.0} for i in range(approvals)]
    return Row(job=Job(id=id, title=f"job {id}", driver="builtin", cwd="/", state=state, unseen=unseen,
                       approvals=asks))


def test_each_kind_of_need_and_what_needs_nothing():
    assert attention_kind(mk("a", State.WAITING, approvals=1)) is Attention.APPROVAL
    assert attention_kind(mk("q", State.WAITING)) is Attention.QUESTION
    assert attention_kind(mk("b", State.BLOCKED)) is Attention.QUESTION
    assert attention_kind(mk("f", State.FAILED, unseen=True)) is Attention.FAILURE
    assert attention_kind(mk("d", State.DONE, unseen=True)) is Attention.FINISHED
    assert attention_kind(mk("i", State.IDLE, unseen=True)) is Attention.FINISHED
    for row in (mk("w"), mk("f", State.FAILED), mk("d", State.DONE), mk("s", State.STOPPED, unseen=True),
                mk("x", State.WORKING, unseen=True)):
        assert attention_kind(row) is None, row.id


def test_the_mark_is_for_an_ended_turn_only():
    assert unseen_mark(mk("d", State.DONE, unseen=True))
    assert not unseen_mark(mk("d", State.DONE))
    assert not unseen_mark(mk("w", State.WORKING, unseen=True)), "working again: nothing to see yet"


def test_the_jump_visits_the_most_urgent_kind_first_then_wraps():
    rows = [mk("d", State.DONE, unseen=True), mk("w"), mk("f", State.FAILED, unseen=True),
            mk("q", State.WAITING), mk("a", State.WAITING, approvals=1), mk("d2", State.IDLE, unseen=True)]
    visited, here = [], None
    for _ in range(6):
        row, kind = next_attention(rows, here)
        visited.append((row.id, kind.word))
        here = row.id
    assert visited == [("a", "approval"), ("q", "question"), ("f", "failed"), ("d", "finished"),
                       ("d2", "finished"), ("a", "approval")]
    assert next_attention(rows, "w")[0].id == "a", "from a row that needs nothing: the most urgent"
    assert next_attention([mk("w"), mk("d", State.DONE)], None) is None


def test_notify_only_when_not_focused_and_once_per_interval():
    assert may_notify(None, None, 100.0, 10.0), "a terminal that never said: notify"
    assert may_notify(False, None, 100.0, 10.0)
    assert not may_notify(True, None, 100.0, 10.0), "focused: the person sees the app"
    assert not may_notify(False, 95.0, 100.0, 10.0)
    assert not may_notify(False, 90.0001, 100.0, 10.0)
    assert may_notify(False, 90.0, 100.0, 10.0), "the interval is over"
    assert may_notify(False, 100.0, 100.0, 0.0), "0: no limit"


def test_the_daemon_and_the_app_parse_a_filter_alike():
    parsed = parse_filter("s:failed Parser")
    assert parsed == (frozenset({State.FAILED}), ["parser"])
    assert filter_matches(State.FAILED, "fix the parser", "k3m9", parsed)
    assert not filter_matches(State.DONE, "fix the parser", "k3m9", parsed)
    assert filter_matches(State.DONE, "x", "K3M9", parse_filter("k3m"))
    assert parse_filter("s:nope")[0] == frozenset(), "an unknown state matches nothing"
    assert parse_filter("")[0] is None
