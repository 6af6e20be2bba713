"""The rules of provider-native subagents (Claude Code's ``Task``) in the subagent panel, on a fake clock."""

from __future__ import annotations

from typing import Any

from roost.models import Job, Row, State
from roost.rules.provider_subagents import is_provider, provider_counts, provider_rows, subagent_entries
from roost.rules.views import panel_rows, subagent_hint_visible

NOW = 1_800_000_000.0
PARENT = "p1ar"


def parent(state: State = State.WORKING, since: float = 100.0) -> Row:
    return Row(Job(id=PARENT, title="the parent", driver="claude", cwd="/src", state=state,
                   state_since=NOW - since, created_at=NOW - 200, pid=4000))


def sub(seq: int, ident: str, state: str, text: str = "", title: str = "count the files", ago: float = 0.0,
        job: str = PARENT) -> dict[str, Any]:
    return {"seq": seq, "job": job, "ts": NOW - ago, "kind": "subagent",
            "data": {"id": ident, "title": title, "state": state, "text": text}}


def test_the_last_entry_per_id_wins_and_every_entry_is_kept_in_order():
    entries = [sub(3, "t1", "working", "halfway", ago=20), sub(1, "t1", "working", "count them", ago=30),
               sub(5, "t1", "done", "42 files", title="count all files", ago=10),
               sub(4, "t2", "working", "look", title="look around", ago=15)]
    rows = provider_rows(entries, parent())
    assert [row.id for row in rows] == ["t1", "t2"]  # oldest first
    first = rows[0]
    assert first.state is State.DONE and first.job.title == "count all files" and first.job.last_text == "42 files"
    assert first.job.state_since == NOW - 10 and first.job.created_at == NOW - 30
    assert [entry["seq"] for entry in first.entries] == [1, 3, 5]
    assert first.parent == PARENT and is_provider(first) and not is_provider(parent())
    assert rows[1].state is State.WORKING


def test_states_failed_and_a_working_one_whose_parent_turn_ended():
    entries = [sub(1, "t1", "working", "go"), sub(2, "t1", "failed", "it broke"), sub(3, "t2", "working", "go", ago=20)]
    working, failed = provider_rows(entries, parent())  # t2 started first
    assert failed.state is State.FAILED and failed.job.reason == "it broke"
    assert working.state is State.WORKING
    stopped, _ = provider_rows(entries, parent(State.STOPPED, since=5))
    assert stopped.state is State.STOPPED and stopped.job.state_since == NOW - 5
    assert "parent's turn ended" in stopped.job.reason


def test_other_kinds_other_jobs_duplicates_and_malformed_entries_are_left_out():
    entries = [sub(1, "t1", "working"), sub(1, "t1", "working"), sub(2, "t9", "working", job="else"),
               {"seq": 3, "job": PARENT, "ts": NOW, "kind": "text", "data": {"text": "hi"}},
               {"seq": 4, "job": PARENT, "ts": NOW, "kind": "subagent", "data": {"title": "no id"}}]
    assert {ident: len(mine) for ident, mine in subagent_entries(entries, PARENT).items()} == {"t1": 1}
    assert [row.id for row in provider_rows(entries, parent())] == ["t1"]


def test_counts():
    entries = [sub(1, "t1", "working"), sub(2, "t2", "working"), sub(3, "t2", "done", "ok"), sub(4, "t3", "working")]
    rows = provider_rows(entries, parent())
    assert provider_counts([parent(), *rows]) == (3, 2)
    assert provider_counts(provider_rows(entries, parent(State.IDLE))) == (3, 0)


def lines(rows: list[Row], now: float, mode: str = "normal") -> list[tuple[str, str]]:
    return [(line.row.id, line.row.state.value) for line in panel_rows([parent(), *rows], PARENT, now, mode)]


def test_lifetimes_in_the_panel_are_those_of_any_row():
    entries = [sub(1, "w", "working", ago=50), sub(2, "d", "working", ago=50), sub(3, "d", "done", "ok", ago=10),
               sub(4, "f", "working", ago=50), sub(5, "f", "failed", "no", ago=10)]
    rows = provider_rows(entries, parent())
    # normal: working shown, failed for 30 s, done leaves at once (the footer hint says where it went)
    assert lines(rows, NOW) == [("w", "working"), ("f", "failed")]
    assert subagent_hint_visible([parent(), *rows], PARENT, NOW)
    assert lines(rows, NOW + 25) == [("w", "working")]
    assert not subagent_hint_visible([parent(), *rows], PARENT, NOW + 25)
    # /subagents: finished ones within 30 s, below running work
    assert lines(rows, NOW, "recent") == [("w", "working"), ("d", "done"), ("f", "failed")]
    assert lines(rows, NOW + 25, "recent") == [("w", "working")]
    # /subagents all: every one
    assert len(lines(rows, NOW + 9999, "all")) == 3


def test_they_sit_among_roost_children_as_children_of_the_open_job():
    child = Row(Job(id="c1ld", title="a roost child", driver="builtin", cwd="/src", state=State.WORKING,
                    created_at=NOW - 40, parent=PARENT, pid=4001))
    rows = provider_rows([sub(1, "t1", "working", ago=45)], parent())
    shown = panel_rows([parent(), child, *rows], PARENT, NOW)
    assert [(line.row.id, line.depth, is_provider(line.row)) for line in shown] == [("t1", 1, True),
                                                                                   ("c1ld", 1, False)]
