"""The search screen and the fork key, driven key by key against a real daemon with built-in workers."""

from __future__ import annotations

from roost.tui.agent_view import AgentViewScreen
from roost.tui.job_screen import JobScreen
from roost.tui.search_screen import SearchScreen

from tui_helpers import SIZE, make_app, notice, press_alone, select_row, type_text, until


async def open_search(pilot, app, rows: int) -> SearchScreen:
    """``S`` on the agent view once it lists ``rows`` jobs; the search screen."""
    await until(pilot, lambda: isinstance(app.screen, AgentViewScreen) and app.screen.table.row_count == rows,
                "the agent view")
    await press_alone(pilot, "S")
    return await until(pilot, lambda: isinstance(app.screen, SearchScreen) and app.screen, "the search screen")


async def test_S_searches_every_transcript_and_enter_opens_the_job_at_the_entry(daemon):
    many = "\n".join([*(f"say filler line {i}" for i in range(80)), "say the bittern booms", "say after it"])
    job = daemon.spawn(many)
    other = daemon.spawn("say a bittern elsewhere")
    daemon.wait_state(job, "idle", "done")
    daemon.wait_state(other, "idle", "done")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_search(pilot, app, 2)
        await type_text(pilot, "bittern booms")
        await pilot.press("enter")
        await until(pilot, lambda: screen.results, "the results")
        assert {r["job"] for r in screen.results} == {job}, "every word must match"
        [said] = [r for r in screen.results if r["kind"] == "text"]
        row = screen.results.index(said)
        snippet = screen.table.get_row_at(row)[3]
        marked = {snippet.plain[span.start:span.end] for span in snippet.spans if "reverse" in str(span.style)}
        assert marked == {"bittern", "booms"}
        screen.table.move_cursor(row=row)
        await pilot.press("enter")
        opened = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, "the job screen")
        await until(pilot, lambda: opened.loaded, "the transcript")
        assert opened.job_id == job and opened.at == said["seq"]
        transcript = opened.transcript
        top = int(transcript.scroll_offset.y)
        shown = [strip.text for strip in transcript.lines[top:top + transcript.size.height]]
        assert any("the bittern booms" in line for line in shown), shown
        assert not transcript.following and transcript.more_before, "it opens where the entry is, not at the tail"
        assert "filler line 10" not in "\n".join(strip.text for strip in transcript.lines), "only a few entries above"
        await pilot.press("pageup")
        await until(pilot, lambda: "filler line 70" in "\n".join(strip.text for strip in transcript.lines),
                    "older entries paged in above")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen, "back to the results")


async def test_a_search_that_finds_nothing_says_so(daemon):
    job = daemon.spawn("say hi")
    daemon.wait_state(job, "idle", "done")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await open_search(pilot, app, 1)
        await type_text(pilot, "zzqqxx")
        await pilot.press("enter")
        await until(pilot, lambda: "nothing matches" in notice(app), "the notice")


async def test_F_forks_the_selected_job(daemon):
    job = daemon.spawn("say remember the rail")
    daemon.wait_state(job, "idle", "done")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await press_alone(pilot, "F")
        await until(pilot, lambda: "forked" in notice(app), "the fork's notice")
        [forked] = [r for r in daemon.call("list")["rows"] if r["id"] != job]
        assert forked["title"] == "fork of say remember the rail" and forked["id"] in notice(app)
