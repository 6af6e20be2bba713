"""What users of agent views expect: help, filters, peek, rename, the archived view, jumps,
stopping the open job, the breadcrumb — each driven by its keys against a real daemon."""

from __future__ import annotations

from roost.tui.agent_view import AgentViewScreen
from roost.tui.archived_view import ArchivedScreen
from roost.tui.command_line import CommandLine
from roost.tui.filter_box import FILTER_HELP
from roost.tui.help_screen import HelpScreen
from roost.tui.job_screen import JobScreen

from tui_helpers import (SIZE, make_app, notice, press_alone, select_row, table_ids, transcript_text,
                         type_text, until)
from test_tui_pilot import open_tree


def help_text(app) -> str:
    return "\n".join(str(label.render()) for label in app.screen.query("Static"))


async def test_question_mark_lists_the_keys_that_work_where_you_are(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen), "home")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = help_text(app)
        assert "archive" in text and "K K" in text and "stop / hide" not in text
        await pilot.press("escape")
        await pilot.press("enter")
        job_screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, "the job screen")
        await until(pilot, lambda: job_screen.panel.lines, "its panel")
        await pilot.press("down")
        await press_alone(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "stop / hide" in help_text(app) and "archive" not in help_text(app)
        keys = [keys for keys, _ in app.screen._lines]
        assert "↑" not in keys and "pgdn" not in " ".join(keys), f"a key listed twice: {keys}"
        assert FILTER_HELP in help_text(app), "the panel filters: its help says how"
        await pilot.press("escape")
        assert app.screen is job_screen and app.focused is job_screen.panel
        await pilot.press("up")
        await until(pilot, lambda: app.focused is job_screen.composer, "the composer")
        await pilot.press("f1")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help from the composer")
        assert FILTER_HELP not in help_text(app), "the composer has no filter: no filter help"


async def test_the_filter_narrows_by_title_id_and_state_and_escape_clears_it(daemon):
    alpha = daemon.spawn("say a", title="alpha job")
    beta = daemon.spawn("fail on purpose", title="beta job")
    daemon.wait_state(alpha, "idle")
    daemon.wait_state(beta, "failed")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 2, "two rows")
        await pilot.press("slash")
        await type_text(pilot, "alpha")
        assert table_ids(app) == [alpha]
        await pilot.press("ctrl+u")
        await type_text(pilot, "s:failed")
        assert table_ids(app) == [beta]
        await pilot.press("ctrl+u")
        await type_text(pilot, alpha)
        assert table_ids(app) == [alpha], "by id"
        await pilot.press("enter")
        assert app.focused is app.screen.table and table_ids(app) == [alpha], "Enter keeps the filter"
        assert "filter: " + alpha in str(app.screen.query_one("#topbar").render())
        await pilot.press("escape")
        assert sorted(table_ids(app)) == sorted([alpha, beta])
        await pilot.press("colon")
        assert isinstance(app.focused, CommandLine), "the command line stays on :"


async def test_the_panel_filter(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        await pilot.press("down")
        await press_alone(pilot, "slash")
        assert app.focused is screen.filter_box
        await type_text(pilot, "deep")
        assert [line.label for line in screen.panel.lines] == ["└ say deep"]
        await pilot.press("enter")
        assert app.focused is screen.panel and "filter: deep" in screen.panel.border_title
        await press_alone(pilot, "slash")
        await pilot.press("escape")
        assert len(screen.panel.lines) == 3


async def test_space_peeks_at_the_selected_job_and_hides_again(daemon):
    job = daemon.spawn("say first words\nsay last words", title="talker")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await pilot.press("space")
        peek = app.screen.peek
        await until(pilot, lambda: "last words" in str(peek.render()), "the peek")
        assert "talker" in peek.border_title and isinstance(app.screen, AgentViewScreen)
        await pilot.press("space")
        assert not peek.display


async def test_a_waiting_jobs_row_and_peek_show_what_it_asks_made_safe(daemon):
    """The question, not the peek line of its last text: a long one keeps its end (what it asks),
    and an escape sequence in it is shown, never obeyed."""
    question = "the release notes cover " + ", ".join(f"v1.{n}" for n in range(60)) + ": \x1b[2Jwhich branch?"
    job = daemon.spawn(f"ask {question}", title="asker")
    assert daemon.wait_state(job, "waiting")["question"] == question  # as said, whole: the app makes it safe
    (slim,) = [r for r in daemon.rows() if r["id"] == job]
    assert len(slim["question"]) == 200 and slim["question"].endswith("\x1b[2Jwhich branch?")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        activity = app.screen.table.get_cell(job, "activity").plain
        assert activity.startswith("the release notes cover v1.0, v1.1")
        await pilot.press("space")
        peek = app.screen.peek
        await until(pilot, lambda: "it asks you:" in str(peek.render()), "the question in the peek")
        shown = str(peek.render())
        asks = shown[shown.index("it asks you:"):]
        assert asks.startswith("it asks you: the release notes cover v1.0") and "…" in asks
        assert asks.replace("\n", "").endswith("^[[2Jwhich branch?") and "\x1b" not in shown


async def test_r_renames_through_the_daemon(daemon):
    job = daemon.spawn("say hi", title="old name")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await pilot.press("r")
        helps = [str(label.render()) for label in app.screen.query(".dialog-help")]
        assert helps == ["enter to rename · esc to cancel"], "it said 'enter to send'"
        await pilot.press("ctrl+u")
        await type_text(pilot, "new name")
        await pilot.press("enter")
        daemon.wait_row(job, lambda r: r["title"] == "new name", what="the rename")
        await until(pilot, lambda: notice(app) == f"renamed {job} to new name", "the notice")


async def test_the_archived_view_unarchives(daemon):
    job = daemon.spawn("say bye", title="gone for now")
    daemon.wait_state(job, "idle")
    daemon.call("archive", job=job)
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        assert job not in table_ids(app)
        await pilot.press("A")
        screen = await until(pilot, lambda: isinstance(app.screen, ArchivedScreen) and app.screen, "the archived view")
        await until(pilot, lambda: screen.table.row_count == 1, "the archived row")
        await pilot.press("u")
        daemon.wait_row(job, lambda r: r["archived_at"] is None, what="the unarchive")
        await until(pilot, lambda: screen.table.row_count == 0, "the row gone from the archived view")
        await pilot.press("escape")
        await until(pilot, lambda: job in table_ids(app), "the job back in the agent view")


async def test_w_jumps_to_the_next_job_that_needs_you_and_g_G_to_the_ends(daemon):
    asks = [daemon.spawn("ask which?", title=f"asker {n}") for n in range(2)]
    quiet = daemon.spawn("say nothing to ask", title="quiet")
    for job in asks:
        daemon.wait_state(job, "waiting")
    daemon.wait_state(quiet, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, quiet)
        order = table_ids(app)
        await pilot.press("w")
        first = app.screen.table.selected_id()
        assert first in asks
        await pilot.press("w")
        assert app.screen.table.selected_id() in asks and app.screen.table.selected_id() != first
        await pilot.press("G")
        assert app.screen.table.selected_id() == order[-1]
        await pilot.press("g")
        assert app.screen.table.selected_id() == order[0]


async def test_stop_stops_the_open_job_and_the_breadcrumb_shows_the_whole_path(daemon):
    root = daemon.spawn("spawn spawn wait-for never; wait-for never\nwait-for never", title="root")
    child = daemon.wait_for(lambda: daemon.children(root), what="a child")[0]["id"]
    grandchild = daemon.wait_for(lambda: daemon.children(child), what="a grandchild")[0]["id"]
    daemon.wait_state(grandchild, "working")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon")
        await type_text(pilot, f"open {grandchild}")
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, "the grandchild")
        await until(pilot, lambda: len(screen.path) == 2, "the path")
        assert screen.path == ["root", "spawn wait-for never"]
        assert str(screen.jobbar.render()).startswith("root › spawn wait-for never › wait-for never")
        await type_text(pilot, "/stop")
        await pilot.press("enter")
        daemon.wait_state(grandchild, "stopped")
        assert daemon.show(child)["state"] == "working"
        await until(pilot, lambda: notice(app) == "stopped this job", "the notice")
        await until(pilot, lambda: "restarts it" in screen.composer.border_title, "the composer's note")


async def test_open_job_shows_its_transcript_after_the_filter(daemon):
    job = daemon.spawn("say found me", title="needle")
    daemon.spawn("say other", title="hay")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 2, "two rows")
        await pilot.press("slash")
        await type_text(pilot, "needle")
        await pilot.press("enter", "enter")
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, "the job")
        await until(pilot, lambda: "found me" in transcript_text(screen), "its transcript")
        assert screen.job_id == job
