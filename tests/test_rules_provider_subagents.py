"""The rules of provider-native subagents (Claude Code's ``Task``) in the subagent panel, on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from roost.daemon.storage.index import JobIndex
from roost.models import Job, Row, State
from roost.rules.provider_subagents import is_provider, provider_rows, subagent_entries
from roost.rules.views import agent_view_rows, panel_rows, subagent_counts, subagent_hint_visible

NOW = 1_800_000_000.0
PARENT = "p1ar"


def parent(state: State = State.WORKING, since: float = 100.0, up: bool = True) -> Row:
    return Row(Job(id=PARENT, title="the parent", driver="claude", cwd="/src", state=state,
                   state_since=NOW - since, created_at=NOW - 200, pid=4000 if up else None))


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


def test_states_failed_and_a_working_one_whose_parents_worker_ended():
    entries = [sub(1, "t1", "working", "go"), sub(2, "t1", "failed", "it broke"), sub(3, "t2", "working", "go", ago=20)]
    working, failed = provider_rows(entries, parent())  # t2 started first
    assert failed.state is State.FAILED and failed.job.reason == "it broke"
    assert working.state is State.WORKING
    background, _ = provider_rows(entries, parent(State.IDLE))  # Claude Code runs them on between turns
    assert background.state is State.WORKING
    stopped, _ = provider_rows(entries, parent(State.IDLE, since=5, up=False))
    assert stopped.state is State.STOPPED and stopped.job.state_since == NOW - 5
    assert "parent's worker ended" in stopped.job.reason


def test_other_kinds_other_jobs_duplicates_and_malformed_entries_are_left_out():
    entries = [sub(1, "t1", "working"), sub(1, "t1", "working"), sub(2, "t9", "working", job="else"),
               {"seq": 3, "job": PARENT, "ts": NOW, "kind": "text", "data": {"text": "hi"}},
               {"seq": 4, "job": PARENT, "ts": NOW, "kind": "subagent", "data": {"title": "no id"}}]
    assert {ident: len(mine) for ident, mine in subagent_entries(entries, PARENT).items()} == {"t1": 1}
    assert [row.id for row in provider_rows(entries, parent())] == ["t1"]


#: Every way an entry can go: a start, progress, an end, a revival, an unknown word, no id, an id
#: that is not text, another job's.
MIXED = [sub(1, "t1", "working"), sub(2, "t2", "working"), sub(3, "t2", "working", "progress"),
         sub(4, "t2", "done", "ok"), sub(5, "t3", "working"), sub(6, "t4", "failed", "at once"),
         sub(7, "t5", "done"), sub(8, "t5", "working", "again"), sub(9, "t6", "thinking"),
         {"seq": 10, "job": PARENT, "ts": NOW, "kind": "subagent", "data": {"title": "no id", "state": "working"}},
         {"seq": 11, "job": PARENT, "ts": NOW, "kind": "subagent", "data": {"id": 7, "state": "working"}},
         sub(12, "t7", "working", job="else")]


def counted_by_the_daemon(entries: list[dict[str, Any]], state: State, descendants: int = 0,
                          running: int = 0, up: bool = True) -> Row:
    """The parent's row as the daemon sends it after recording ``entries`` in order (its index
    counts each as it records it), then moving to ``state``, its worker up or gone."""
    index = JobIndex()
    job = parent().job
    index.add(job)
    for entry in entries:
        if entry["job"] == PARENT:
            index.count_subagent(job, entry["data"], lambda: [])
    job.state = state
    job.pid = job.pid if up else None
    row = Row.from_wire(index.row(PARENT))
    row.descendants, row.running_descendants = descendants, running
    return row


@pytest.mark.parametrize("up", [True, False])
@pytest.mark.parametrize("state", list(State))
def test_the_panel_and_the_parents_row_give_the_same_counts_in_every_state(state: State, up: bool):
    row = counted_by_the_daemon(MIXED, state, up=up)
    shown = provider_rows(MIXED, row)
    assert subagent_counts(row) == (len(shown), sum(r.state is State.WORKING for r in shown))
    assert len(shown) == 6  # t1..t6; no id, a number id and the other job's are no subagents
    # t1, t3, t5 (again) and t6 (an unknown word works) run for as long as the worker runs them
    assert subagent_counts(row)[1] == (4 if up else 0)


def test_the_home_view_counts_them_with_the_roost_jobs_below():
    row = counted_by_the_daemon(MIXED, State.WORKING, descendants=2, running=1)
    (line,) = agent_view_rows([row])
    assert line.summary == "8 subagents (5 running)"
    idle = counted_by_the_daemon(MIXED, State.IDLE, descendants=2, running=1)
    assert agent_view_rows([idle])[0].summary == "8 subagents (5 running)"  # in the background
    closed = counted_by_the_daemon(MIXED, State.IDLE, descendants=2, running=1, up=False)
    assert agent_view_rows([closed])[0].summary == "8 subagents (1 running)"
    alone = counted_by_the_daemon([sub(1, "t1", "working")], State.WORKING)
    assert agent_view_rows([alone])[0].summary == "1 subagent (1 running)"
    assert agent_view_rows([counted_by_the_daemon([], State.WORKING)])[0].summary == ""
    record = parent(State.DONE, up=False).job  # a record as the daemon holds it (not through the wire) counts the same
    record.provider_subagents, record.provider_running = 3, 2
    assert subagent_counts(Row(record)) == (3, 0)


def test_counts_read_again_from_the_timeline_after_a_start_are_exact():
    """A daemon started again (or a new worker) holds none of the job's subagents: the first
    entry reads the recorded ones, so one seen before is not counted twice, whatever the record said."""
    index = JobIndex()
    job = parent().job
    job.provider_subagents, job.provider_running = 99, 99  # a record out of step (older than the counts)
    index.add(job)
    recorded = [e["data"] for e in MIXED if e["job"] == PARENT]
    assert index.count_subagent(job, {"id": "t1", "state": "done"}, lambda: recorded)
    assert (job.provider_subagents, job.provider_running) == (6, 3)
    assert not index.count_subagent(job, {"id": "t3", "state": "working", "text": "more"}, lambda: [])
    assert not index.count_subagent(job, {"title": "no id"}, lambda: [])


def test_thousands_of_subagents_count_right():
    entries = [sub(n, f"t{n // 3}", ("working", "working", "done" if n % 2 else "failed")[n % 3])
               for n in range(9000)]
    entries += [sub(9000 + n, f"live{n}", "working") for n in range(7)]
    row = counted_by_the_daemon(entries, State.WORKING)
    shown = provider_rows(entries, row)
    assert subagent_counts(row) == (3007, 7) == (len(shown), sum(r.state is State.WORKING for r in shown))


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
