"""Attention with the real daemon: ``w`` visits what needs you (approval, question, failure,
finished and not yet seen) in that order; a finished job stays marked until a person opens it,
and the daemon keeps that, so a second client sees the mark go. (That no job may send ``seen``
is tests/test_authority.py's table.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.models import Job, State
from roost.tui.agent_view import AgentViewScreen
from roost.tui.filter_search import SEARCH_LIMIT
from roost.tui.job_screen import JobScreen

from conftest import DaemonHarness, seeded_daemon
from tui_helpers import (SIZE, burst, cell, keys_of, make_app, notice, open_job, press_alone, select_row, table_ids,
                         type_text, until)


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


def _job_screen(app, job: str):
    screen = app.screen
    return screen if isinstance(screen, JobScreen) and screen.job_id == job and screen.loaded else None


async def test_the_jump_works_on_the_job_screen_too_and_w_in_the_composer_is_text(daemon):
    """``w`` worked only on the agent view. On a job screen ``Ctrl+N`` opens the next job that needs
    you in the screen's place (``w`` there is a letter of the message)."""
    failed = daemon.spawn("fail broken on purpose", title="breaker")
    asker = daemon.spawn("ask which branch?", title="asker")
    busy = daemon.spawn("wait-for never", title="busy")
    for job in (failed, asker):
        daemon.wait_for(lambda j=job: settled(daemon, j), what=f"{job}'s turn to end")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, busy)
        await pilot.press("w")
        assert screen.composer.value == "w" and app.screen is screen, "a letter in the composer"
        await pilot.press("ctrl+n")
        opened = await until(pilot, lambda: _job_screen(app, asker), "the asker opened")
        assert notice(app) == "question: asker"
        await pilot.press("ctrl+n")
        await until(pilot, lambda: _job_screen(app, failed), "the failed job opened")
        assert notice(app) == "failed: breaker" and opened not in app.screen_stack, "in the screen's place"
        await until(pilot, lambda: not daemon.show(failed)["unseen"], "opening it was seeing it")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: _job_screen(app, asker), "the asker again: the failure was seen")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen), "back on the agent view")


async def test_w_in_the_subagent_panel_opens_the_subagent_that_needs_you(daemon):
    root = daemon.spawn("spawn wait-for never\nspawn ask which one?\nwait-for never", title="lead")
    daemon.wait_for(lambda: sorted(c["state"] for c in daemon.children(root)) == ["waiting", "working"],
                    what="a working and an asking subagent")
    asker = next(c["id"] for c in daemon.children(root) if c["state"] == "waiting")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, root)
        await until(pilot, lambda: len(screen.panel.lines) == 2, "both subagents in the panel")
        await pilot.press("down")
        await until(pilot, lambda: screen.focused is screen.panel, "the panel selected")
        await press_alone(pilot, "w")
        child = await until(pilot, lambda: _job_screen(app, asker), "the asking subagent opened")
        assert notice(app) == "question: ask which one?"
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen and child not in app.screen_stack, "back on the lead's screen")
        await pilot.press("down")
        await until(pilot, lambda: screen.focused is screen.panel, "the panel selected again")
        await burst(pilot, app, *keys_of("wow"))  # as a terminal sends it: no gap a loaded machine could widen
        await until(pilot, lambda: screen.focused is screen.composer, "w typed in a burst to be text")
        assert screen.composer.value == "wow", screen.composer.value
        assert app.screen is screen
