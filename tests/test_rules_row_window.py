"""Which rows the agent view lets go past its window (roost/rules/row_window.py)."""

from __future__ import annotations

from roost.models import Job, Row, State
from roost.rules.row_window import past_window


def row(job_id: str, state: State, created: float, parent: str | None = None, pid: int | None = None) -> Row:
    return Row(Job(id=job_id, title=job_id, driver="builtin", cwd="/tmp", state=state, state_since=created,
                   created_at=created, parent=parent, pid=pid))


def test_the_oldest_finished_roots_past_the_window_go_and_what_needs_keeping_stays():
    rows = [row(f"d{i}", State.DONE, i) for i in range(5)]
    rows += [row("w", State.WORKING, -10), row("f", State.FAILED, -9), row("q", State.WAITING, -8),
             row("b", State.BLOCKED, -7), row("c", State.DONE, -6, parent="d0"), row("i", State.IDLE, -5, pid=42)]
    assert past_window(rows, 5) == []
    assert past_window(rows, 3) == ["d1", "d0"]
    assert past_window(rows, 0) == ["d4", "d3", "d2", "d1", "d0"]


def test_equal_creation_times_are_ordered_by_id():
    rows = [row("a", State.STOPPED, 1), row("b", State.STOPPED, 1)]
    assert past_window(rows, 1) == ["a"]
