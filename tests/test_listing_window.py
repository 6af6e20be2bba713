"""The agent view's listing window never hides what needs a person, and ``list``'s ``match`` (the
app's filter) reaches every record: the daemon's index in process, at the window and past it."""

from __future__ import annotations

from roost.daemon.storage.index import JobIndex
from roost.models import Job, State


def index_of(states: list[State], approvals_at: int | None = None) -> JobIndex:
    """Root jobs created in this order (the first is the oldest), titled ``job N``."""
    index = JobIndex()
    for n, state in enumerate(states):
        asks = [{"id": "ap1", "tool": "shell", "what": {}, "asked_at": 0.0}] if n == approvals_at else []
        index.add(Job(id=f"j{n:03d}", title=f"job {n}", driver="builtin", cwd="/", state=state, created_at=float(n),
                      approvals=asks))
    return index


def listed(index: JobIndex, limit: int) -> tuple[list[str], int]:
    rows, left = index.agent_view(limit)
    return [row["id"] for row in rows], left


def test_the_window_keeps_the_newest_finished_and_every_job_that_needs_a_person():
    old = [State.FAILED, State.BLOCKED, State.WAITING, State.STOPPED, State.IDLE]
    index = index_of(old + [State.DONE] * 10, approvals_at=4)  # the idle one waits on an approval
    ids, left = listed(index, 10)
    assert ids[:10] == [f"j{n:03d}" for n in range(14, 4, -1)], "the 10 newest"
    assert set(ids[10:]) == {"j000", "j001", "j002", "j004"}, "failed, blocked, waiting, an approval: whatever the window"
    assert left == 1, "only the old stopped job is left out"
    assert listed(index, 11)[1] == 0, "one more in the window: nothing left out"
    assert listed(index, 0) == (["j004", "j002", "j001", "j000"], 11)


def test_list_match_finds_jobs_the_window_left_out_by_id_title_or_state():
    index = index_of([State.DONE] * 300 + [State.FAILED])
    assert [r["id"] for r in index.page(match="j007", roots=True)["rows"]] == ["j007"]
    page = index.page(match="JOB 29", roots=True, newest_first=True, limit=5)
    assert [r["id"] for r in page["rows"]] == ["j299", "j298", "j297", "j296", "j295"]
    assert page["total"] == 13 and page["next"] is not None, "each word anywhere: 29, 129, 229 and 290-299"
    assert [r["id"] for r in index.page(match="s:failed", roots=True)["rows"]] == ["j300"]
    assert index.page(match="s:failed job 2", roots=True)["rows"] == [], "every word must match"
    assert index.page(match="s:nope")["rows"] == [], "an unknown state matches nothing"
