"""Attention with the real daemon: ``w`` visits what needs you (approval, question, failure,
finished and not yet seen) in that order; a finished job stays marked until a person opens it,
and the daemon keeps that, so a second client sees the mark go. (That no job may send ``seen``
is tests/test_authority.py's table.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.models import Job, State
from roost.tui.filter_search import SEARCH_LIMIT

from conftest import DaemonHarness, seeded_daemon
from tui_helpers import SIZE, cell, make_app, notice, open_job, select_row, table_ids, type_text, until


def settled(daemon: DaemonHarness, job: str) -> bool:
    return daemon.show(job)["state"] not in ("queued", "starting", "working")


async def test_w_visits_approval_question_failure_finished_then_opening_clears_the_mark(daemon, tmp_path: Path):
    (tmp_path / "w").mkdir()
    finished = daemon.spawn("say all done", title="finisher")
    failed = daemon.spawn("fail broken on purpose", title="breaker")
    asker = daemon.spawn("ask which branch?", title="asker")
    approver = daemon.spawn("ask-run echo made > made.txt", title="approver", cwd=str(tmp_path / "w"))
    busy = daemon.spawn("work 60", title="busy")
    for job in (finished, failed, asker):
        daemon.wait_for(lambda j=job: settled(daemon, j), what=f"{job}'s turn to end")
    daemon.wait_row(approver, lambda row: bool(row["approvals"]), what="the approval")
    assert daemon.show(finished)["unseen"] and daemon.show(failed)["unseen"], "nobody had them open"
    assert not daemon.show(busy)["unseen"]
    other = daemon.raw()  # a second client, watching the agent view
    other.call("subscribe", what="agent_view")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: {finished, failed, asker, approver, busy} <= set(table_ids(app)), "every row")
        assert cell(app, finished, "title").startswith("• finisher"), "marked until seen"
        assert cell(app, failed, "title").startswith("• breaker")
        assert not cell(app, busy, "title").startswith("•")
        await select_row(pilot, app, busy)
        visited = []
        for _ in range(5):
            await pilot.press("w")
            visited.append(app.screen.table.selected_id())
        assert visited == [approver, asker, failed, finished, approver]
        assert notice(app) == "approval: approver"
        await open_job(pilot, app, finished)
        await until(pilot, lambda: not daemon.show(finished)["unseen"], "the daemon to keep it seen")
        await pilot.press("escape")
        await until(pilot, lambda: finished in table_ids(app) and not cell(app, finished, "title").startswith("•"),
                    "the mark to go")
        await select_row(pilot, app, failed)
        await pilot.press("w")
        assert app.screen.table.selected_id() == approver, "the seen job is not visited again"
    while True:  # the second client got the row without its mark
        frame = other.frame()
        if frame.get("event") == "row" and frame["row"]["id"] == finished and not frame["row"]["unseen"]:
            break
    other.close()


@pytest.mark.parametrize("matching", [SEARCH_LIMIT, SEARCH_LIMIT + 1])
async def test_the_filter_lists_at_most_search_limit_jobs_beyond_the_window_and_says_so(roost_home, matching):
    """Old jobs titled ``alpha`` (``matching`` of them) and newer ``beta`` ones fill the window."""
    records = [Job(id=f"a{n:04d}", title=f"alpha {n}", driver="builtin", cwd="/", state=State.DONE,
                   created_at=1000.0 + n, state_since=1000.0 + n) for n in range(matching)]
    records += [Job(id=f"b{n:04d}", title=f"beta {n}", driver="builtin", cwd="/", state=State.DONE,
                    created_at=9000.0 + n, state_since=9000.0 + n) for n in range(300)]
    daemon = seeded_daemon(roost_home, records)
    try:
        app = make_app(daemon)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.link.more == matching + 100, "the window (200 listed)")
            assert not any(job_id.startswith("a") for job_id in table_ids(app))
            await pilot.press("slash")
            await type_text(pilot, "alpha")
            await until(pilot, lambda: len(table_ids(app)) == min(matching, SEARCH_LIMIT), "the daemon's matches")
            assert table_ids(app)[0] == f"a{matching - 1:04d}", "the newest first"
            said = f"(the newest {SEARCH_LIMIT:,} of {matching:,} matches: roost ls --all)"
            topbar = str(app.screen.query_one("#topbar").render())
            assert (said in topbar) is (matching > SEARCH_LIMIT), topbar
    finally:
        daemon.stop()
