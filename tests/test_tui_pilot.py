"""The app driven key by key (Textual's Pilot) against a real daemon with built-in workers.

Each test asserts both what the app shows and what the daemon did. Where time matters
(``K K`` within 2 s, 30 s lifetimes, the footer hint) the app runs on a fake clock that starts
at the real time (the daemon stamps rows with it) and is moved on by hand.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot

from roost.client import daemon_running
from roost.config import Config, ConfigError
from roost.rules.views import SUBAGENT_HINT
from roost.tui.agent_view import AgentViewScreen, CommandLine
from roost.tui.app import RoostApp
from roost.tui.daemon_link import DaemonSource
from roost.tui.dialogs import ConfirmBox, PromptBox, ScriptBox
from roost.tui.job_screen import JobScreen

from conftest import DaemonHarness

from tui_helpers import (SIZE, FakeClock, answer, burst, cell, keys_of, jobs, make_app, notice, open_job, panel_labels, press_alone,
                         select_row, shown_keys, table_ids, transcript_text, type_text, until)

#: A K K window no pause of a loaded machine reaches: the notice it shows runs on Textual's real
#: timers, which no fake clock stops.
GENEROUS_WINDOW = "double_press_window = 60\n"


# ------------------------------------------------------------------------------------------- agent view


async def test_the_agent_view_lists_top_level_jobs_and_counts_their_subagents(daemon):
    root = daemon.spawn("spawn wait-for never\nsay parent here", title="parent")
    child = daemon.wait_for(lambda: daemon.children(root), what="a child")[0]["id"]
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "1 subagent (1 running)" in (cell(app, root, "activity") if root in table_ids(app)
                                                                else ""), "the subagent count")
        assert table_ids(app) == [root]
        assert child not in table_ids(app)
        assert "parent here" in cell(app, root, "activity")
        assert cell(app, root, "title") in ("parent", "• parent"), "marked once its turn ended unseen"
        assert "working" in cell(app, root, "state") or "idle" in cell(app, root, "state")


async def test_inline_mode_lists_subagents_under_their_parent(daemon):
    root = daemon.spawn("spawn wait-for never\nsay parent here", title="parent")
    child = daemon.wait_for(lambda: daemon.children(root), what="a child")[0]["id"]
    app = make_app(daemon, 'agent_view_subagents = "inline"')
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: table_ids(app) == [root, child], "the child listed under its parent")
        assert cell(app, child, "title") == "↳ wait-for never"


async def test_enter_opens_a_job_attaches_it_and_escape_releases_it(daemon):
    job = daemon.spawn("say hello there")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        await until(pilot, lambda: daemon.show(job)["attached"], "the daemon to know the job is open")
        assert "hello there" in transcript_text(screen)
        assert app.focused is screen.composer
        await pilot.press("escape")
        assert isinstance(app.screen, AgentViewScreen)
        await until(pilot, lambda: not daemon.show(job)["attached"], "the release")


async def test_n_starts_a_job_on_the_default_driver_and_selects_it(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        assert isinstance(app.screen, ScriptBox)
        await type_text(pilot, "say made with n")
        await pilot.press("enter")
        await type_text(pilot, "say a second line")
        await pilot.press("ctrl+s")
        rows = await until(pilot, lambda: jobs(daemon), "the new job")
        job = rows[0]["id"]
        assert rows[0]["driver"] == "builtin"
        await until(pilot, lambda: table_ids(app) == [job] and app.screen.table.selected_id() == job,
                    "the new row, selected")
        daemon.wait_for(lambda: "made with n" in daemon.texts(job), what="the job to run its prompt")
        assert "started say made with n" in notice(app)
        daemon.wait_for(lambda: "a second line" in daemon.texts(job), what="the script's second line")


async def test_m_messages_the_selected_job(daemon):
    first = daemon.spawn("say first job", title="first")
    second = daemon.spawn("say second job", title="second")
    daemon.wait_state(first, "idle")
    daemon.wait_state(second, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, first)
        await pilot.press("m")
        await type_text(pilot, "say got it")
        await pilot.press("enter")
        daemon.wait_for(lambda: "got it" in daemon.texts(first), what="the message to reach the first job")
        assert "got it" not in daemon.texts(second)
        await until(pilot, lambda: notice(app) == "sent to first", "the outcome")


async def test_escape_in_a_prompt_box_sends_nothing(daemon):
    job = daemon.spawn("say quiet")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await pilot.press("m", "x", "escape")
        assert isinstance(app.screen, AgentViewScreen)
        await pilot.pause(0.2)
        assert not any(e["kind"] == "message" for e in daemon.timeline(job))


async def test_p_pins_and_unpins_the_selected_job(daemon):
    job = daemon.spawn("say pin me")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await pilot.press("p")
        daemon.wait_row(job, lambda r: r["pinned"], what="pinned")
        await until(pilot, lambda: cell(app, job, "state").startswith("◉"), "the pinned mark")
        await pilot.press("p")
        daemon.wait_row(job, lambda r: not r["pinned"], what="unpinned")
        await until(pilot, lambda: notice(app) == "unpinned say pin me", "the notice")


async def test_K_twice_stops_the_whole_tree_and_says_how_many(daemon):
    root = daemon.spawn("spawn*2 wait-for never\nwait-for never", title="tree")
    daemon.wait_for(lambda: len(daemon.children(root)) == 2
                    and all(c["state"] == "working" for c in daemon.children(root)), what="two working children")
    other = daemon.spawn("wait-for never", title="other")
    daemon.wait_state(other, "working")
    app = make_app(daemon, GENEROUS_WINDOW)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, root)
        await pilot.press("K")
        assert "press K again within 60 s" in notice(app)
        assert daemon.show(root)["state"] == "working"
        await pilot.press("K")
        await until(pilot, lambda: notice(app) == "stopped 3 jobs", "the stop to be reported")
        assert daemon.show(root)["state"] == "stopped"
        assert all(c["state"] == "stopped" for c in daemon.children(root))
        assert daemon.show(other)["state"] == "working"


async def test_a_second_K_after_two_seconds_only_arms_again(daemon):
    job = daemon.spawn("wait-for never")
    daemon.wait_state(job, "working")
    clock = FakeClock()
    app = make_app(daemon, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await pilot.press("K")
        clock.advance(2.5)
        status = app.screen.query_one("#status")
        status.notice = ""
        await pilot.press("K")
        # The key either stops or arms and says so, at once: the notice is back, so it armed.
        assert "press K again" in notice(app)
        await pilot.press("K")
        daemon.wait_state(job, "stopped")


async def test_a_archives_only_after_a_yes(daemon):
    root = daemon.spawn("spawn say child\nsay parent", title="to archive")
    daemon.wait_for(lambda: daemon.children(root), what="a child")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, root)
        await pilot.press("a")
        assert isinstance(app.screen, ConfirmBox)
        await answer(pilot, "n")
        assert daemon.show(root)["archived_at"] is None
        await pilot.press("a")
        await answer(pilot, "y")
        await until(pilot, lambda: notice(app) == "archived 2 jobs", "the archive")
        assert daemon.show(root)["archived_at"] is not None
        await until(pilot, lambda: root not in table_ids(app), "the row to leave")


async def test_a_job_that_needs_input_stands_out_and_rings_once(daemon):
    app = make_app(daemon)
    rings: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        app.bell = lambda: rings.append(time.monotonic())  # type: ignore[method-assign]
        job = daemon.spawn("ask which branch?", title="asker")
        await until(pilot, lambda: job in table_ids(app) and "waiting" in cell(app, job, "state"), "waiting")
        await until(pilot, lambda: rings, "the bell")
        assert app.screen.table.get_cell(job, "title").style.bold
        assert "1 needs you" in str(app.screen.query_one("#topbar").render())
        daemon.call("pin", job=job)  # a change to the row that still asks
        await until(pilot, lambda: cell(app, job, "state").startswith("◉"), "the pinned row")
        assert len(rings) == 1


async def test_no_bell_when_notify_is_none(daemon):
    app = make_app(daemon, 'notify = []')
    rings: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        app.bell = lambda: rings.append(1.0)  # type: ignore[method-assign]
        job = daemon.spawn("report blocked need a key")
        await until(pilot, lambda: job in table_ids(app) and "blocked" in cell(app, job, "state"), "blocked")
        await pilot.pause(0.2)
        assert rings == []


async def test_q_quits(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_select_puts_the_cursor_on_a_job(daemon):
    first = daemon.spawn("say a")
    daemon.spawn("say b")
    app = make_app(daemon, select=first)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.screen.table.selected_id() == first, "the selected job")


async def test_keys_sent_in_a_burst_act_on_the_row_under_the_cursor_then(daemon):
    jobs = [daemon.spawn("wait-for never", title=f"job {n}") for n in range(3)]
    for job in jobs:
        daemon.wait_state(job, "working")
    app = make_app(daemon, clock=FakeClock())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 3, "three rows")
        target = table_ids(app)[2]
        await burst(pilot, app, "j", "j", "j", "k", "j", "K", "K")
        daemon.wait_state(target, "stopped")
        assert [daemon.show(j)["state"] for j in jobs].count("working") == 2


# ------------------------------------------------------------------------------------------- command line


async def test_colon_opens_the_command_line_and_new_starts_a_job(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon")
        assert isinstance(app.focused, CommandLine)
        await type_text(pilot, "new say from the command line")
        await pilot.press("enter")
        job = (await until(pilot, lambda: jobs(daemon), "the job"))[0]["id"]
        daemon.wait_for(lambda: "from the command line" in daemon.texts(job), what="the prompt run")
        assert not isinstance(app.focused, CommandLine)


async def test_commands_open_send_stop_help_and_refusals(daemon):
    root = daemon.spawn("spawn wait-for never\nwait-for never", title="root")
    child = daemon.wait_for(lambda: daemon.children(root), what="a child")[0]["id"]
    idle = daemon.spawn("say idle one")
    daemon.wait_state(idle, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        async def run(command: str) -> None:
            await pilot.press("colon")
            await type_text(pilot, command)
            await pilot.press("enter")

        await run(f"send {idle} say via send")
        daemon.wait_for(lambda: "via send" in daemon.texts(idle), what="the sent message")
        await run("help")
        assert "open ID" in notice(app)
        await run("frobnicate")
        assert "unknown command 'frobnicate'" in notice(app)
        await run("send")
        assert notice(app) == "usage: send ID TEXT"
        await run("open nope")
        assert notice(app) == "no job with id 'nope'"
        await run(f"stop {root}")
        await until(pilot, lambda: notice(app) == "stopped 2 jobs", "the stop")
        await run(f"open {child}")
        await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.job_id == child, "the child")
        await pilot.press("escape")
        await run("quit")
        await pilot.pause()
        assert not app.is_running


async def test_escape_leaves_the_command_line(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("colon", "n", "escape")
        assert not isinstance(app.focused, CommandLine)
        assert app.screen.query_one(CommandLine).value == ""
        assert isinstance(app.screen, AgentViewScreen)


async def test_keys_typed_right_after_colon_go_to_the_command_line(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await burst(pilot, app, "colon", *keys_of("new say burst"), "enter")
        job = (await until(pilot, lambda: jobs(daemon), "the job"))[0]
        assert job["title"] == "say burst"
        assert len(jobs(daemon)) == 1, "no key of the burst started a job of its own"


# ------------------------------------------------------------------------------------------- job screen


async def test_the_transcript_streams_what_the_job_says_and_its_tools(daemon):
    job = daemon.spawn("say one")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        assert "one" in transcript_text(screen).splitlines()
        daemon.call("send", job=job, text="spawn say child line\nsay two")
        await until(pilot, lambda: "two" in transcript_text(screen).splitlines(), "the streamed line")
        text = transcript_text(screen)
        assert "› spawn say child line" in text
        assert "⚙ roost_spawn" in text and "spawned" in text
        assert text.splitlines().count("one") == 1, "an entry in both the log and the stream shows once"


async def test_reports_from_children_show_in_the_transcript(daemon):
    root = daemon.spawn("spawn report done child finished well")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, root)
        await until(pilot, lambda: "↩ say" in transcript_text(screen) or "↩ report" in transcript_text(screen),
                    "the child's report")
        assert "done: child finished well" in transcript_text(screen)


async def test_the_composer_sends_and_a_message_to_a_stopped_job_restarts_it(daemon):
    job = daemon.spawn("wait-for never", title="worker")
    daemon.wait_state(job, "working")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        await type_text(pilot, "say later")
        await pilot.press("enter")
        await until(pilot, lambda: notice(app).startswith("queued for worker"), "queued")
        assert screen.composer.value == ""
        daemon.call("stop", job=job)
        daemon.wait_state(job, "stopped")
        await until(pilot, lambda: screen.composer.border_title == "stopped · what you send restarts it",
                    "the composer saying so before anything is sent")
        await type_text(pilot, "say again")
        await pilot.press("enter")
        await until(pilot, lambda: notice(app) == "restarted worker with your message", "the restart")
        daemon.wait_for(lambda: "again" in daemon.texts(job), what="the restarted turn")
        await until(pilot, lambda: screen.composer.border_title == "", "the note gone once it runs")


async def test_a_message_resumes_a_done_child_whose_worker_was_closed(daemon):
    root = daemon.spawn("spawn report done first pass\nsay parent", title="root")
    child = daemon.wait_for(lambda: daemon.children(root), what="a child")[0]["id"]
    daemon.wait_row(child, lambda r: r["reaped"] and not r["worker_up"], timeout=15, what="the child closed")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await open_job(pilot, app, root)
        await type_text(pilot, "/subagents all")
        await pilot.press("enter")
        await press_alone(pilot, "m")  # message the selected (done, closed) child without opening it
        await until(pilot, lambda: isinstance(app.screen, PromptBox), "the message box")
        await type_text(pilot, "say second pass")
        await pilot.press("enter")
        await until(pilot, lambda: notice(app) == "resumed report done first pass with your message", "resumed")
        daemon.wait_for(lambda: "second pass" in daemon.texts(child), what="the resumed turn")
        assert isinstance(app.screen, JobScreen) and app.screen.job_id == root


async def test_page_up_and_down_scroll_the_transcript(daemon):
    job = daemon.spawn("\n".join(f"say line {n}" for n in range(80)))
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        log = screen.transcript
        await until(pilot, lambda: log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y, "the end in view")
        await pilot.press("pageup")
        await until(pilot, lambda: log.scroll_y < log.max_scroll_y, "a page up")
        await pilot.press("pagedown")
        await until(pilot, lambda: log.scroll_y == log.max_scroll_y, "back at the end")
        assert app.focused is screen.composer


async def test_unknown_slash_commands_are_refused_in_the_composer(daemon):
    job = daemon.spawn("say hi")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await open_job(pilot, app, job)
        await type_text(pilot, "/nope")
        await pilot.press("enter")
        assert "unknown command /nope" in notice(app)
        assert not any(e["kind"] == "message" for e in daemon.timeline(job))


# ------------------------------------------------------------------------------------------- subagent panel

TREE = ("spawn say reading; wait-for never\n"
        "spawn say nesting; spawn say deep;; wait-for never; wait-for never\n"
        "wait-for never")


async def open_tree(pilot: Pilot, app: RoostApp, daemon: DaemonHarness) -> tuple[JobScreen, str]:
    root = daemon.spawn(TREE, title="tree")
    daemon.wait_for(lambda: sum(1 for c in daemon.children(root) for _ in daemon.children(c["id"])) == 1
                    and all(c["state"] == "working" for c in daemon.children(root)), what="the tree")
    screen = await open_job(pilot, app, root)
    await until(pilot, lambda: len(screen.panel.lines) == 3, "three panel rows")
    return screen, root


async def test_the_panel_is_a_tree_with_plus_counts(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        assert panel_labels(screen) == ["say reading", "say nesting (+1)", "└ say deep"]
        assert screen.panel.display


async def test_down_enters_the_panel_and_up_at_the_top_escape_or_typing_leave_it(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        await pilot.press("down")
        assert app.focused is screen.panel and screen.panel.mode == "recent"
        assert screen.panel.selected().label == "say reading"
        await pilot.press("down", "down", "down")
        assert screen.panel.selected().label == "└ say deep"
        await pilot.press("up", "up", "up")
        assert app.focused is screen.composer
        await pilot.press("down", "escape")
        assert app.focused is screen.composer and screen.panel.mode == "normal"
        await pilot.press("down", "h", "i")
        assert app.focused is screen.composer
        assert screen.composer.value == "hi"


async def test_typing_in_the_panel_in_a_burst_keeps_panel_keys_as_text(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        await pilot.press("down")
        await burst(pilot, app, "h", "i", "space", "m", "o", "m", "x")
        assert screen.composer.value == "hi momx"
        assert isinstance(app.screen, JobScreen), "m did not open a message box"


async def test_enter_in_the_panel_opens_the_child_and_escape_goes_back(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, root = await open_tree(pilot, app, daemon)
        nesting = screen.panel.lines[1].row.id
        await burst(pilot, app, "down", "down", "enter")
        child_screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.job_id == nesting
                                   and app.screen, "the child's screen")
        await until(pilot, lambda: panel_labels(child_screen) == ["say deep"], "the child's own panel")
        await until(pilot, lambda: daemon.show(nesting)["attached"], "the child attached")
        await until(pilot, lambda: "tree ›" in str(child_screen.query_one("#jobbar").render()),
                    "the path in the job bar (read as the screen opens, maybe after the panel's rows)")
        await pilot.press("escape")
        assert app.screen is screen
        assert daemon.show(root)["attached"]


async def test_m_in_the_panel_messages_the_child(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        first = screen.panel.lines[0].row.id
        await pilot.press("down")
        await press_alone(pilot, "m")
        assert isinstance(app.screen, PromptBox)
        await type_text(pilot, "say hello child")
        await pilot.press("enter")
        await until(pilot, lambda: notice(app).startswith("queued for say reading"), "the outcome")
        assert any(e["kind"] == "message" for e in daemon.timeline(first))


async def test_x_stops_a_running_row_and_hides_a_finished_one(daemon):
    clock = FakeClock()
    app = make_app(daemon, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        first = screen.panel.lines[0].row.id
        await pilot.press("down")
        await press_alone(pilot, "x")
        daemon.wait_state(first, "stopped")
        await until(pilot, lambda: notice(app) == "stopped say reading", "the stop")
        await until(pilot, lambda: screen.panel.lines[-1].row.id == first, "the stopped row below running work")
        second = screen.panel.lines[0].row.id
        assert screen.panel.cursor == second, "the cursor stays at its place, not with the stopped row"
        await press_alone(pilot, "x")
        daemon.wait_state(second, "stopped")  # a second x stops the next (it hid the first)
        assert first in [line.row.id for line in screen.panel.lines]
        screen.panel.cursor = first
        await press_alone(pilot, "x")
        assert first not in [line.row.id for line in screen.panel.lines]
        assert "hid say reading" in notice(app)
        assert daemon.show(first)["state"] == "stopped"


async def test_K_twice_in_the_panel_stops_every_running_row_nested_too(daemon):
    app = make_app(daemon, GENEROUS_WINDOW)  # the offer and its notice outlast a loaded machine's pauses
    async with app.run_test(size=SIZE) as pilot:
        screen, root = await open_tree(pilot, app, daemon)
        await pilot.press("down")
        await press_alone(pilot, "K")
        assert "press K again within 60 s to stop 3 running subagents" == notice(app)
        await press_alone(pilot, "K")
        await until(pilot, lambda: notice(app) == "stopped 3 subagents", "the stop")
        states = [daemon.show(line.row.id)["state"] for line in screen.panel.lines]
        assert states == ["stopped"] * 3
        assert daemon.show(root)["state"] == "working", "the open job itself keeps working"


async def test_subagents_stop_stops_every_running_row_at_once(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, root = await open_tree(pilot, app, daemon)
        ids = [line.row.id for line in screen.panel.lines]
        await type_text(pilot, "/subagents stop")
        await pilot.press("enter")
        await until(pilot, lambda: notice(app) == "stopped 3 subagents", "the stop")
        assert [daemon.show(i)["state"] for i in ids] == ["stopped"] * 3
        assert daemon.show(root)["state"] == "working"


async def test_a_done_row_leaves_at_once_and_the_hint_shows_for_30s(daemon):
    clock = FakeClock()
    app = make_app(daemon, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        root = daemon.spawn("spawn report done quick one\nspawn wait-for never\nwait-for never", title="root")
        screen = await open_job(pilot, app, root)
        status = screen.query_one("#status")
        await until(pilot, lambda: daemon.children(root) and all(c["state"] in ("done", "working")
                                                                  for c in daemon.children(root))
                    and any(c["state"] == "done" for c in daemon.children(root)), "a done child")
        clock.freeze()  # the 30 s of /subagents count from here by advance only, not by load
        await until(pilot, lambda: panel_labels(screen) == ["wait-for never"], "the done row gone")
        await until(pilot, lambda: status.hint == SUBAGENT_HINT, "the footer hint")
        await type_text(pilot, "/subagents")
        await pilot.press("enter")
        assert panel_labels(screen) == ["wait-for never", "report done quick one"]
        assert screen.panel.lines[1].row.state.value == "done"
        assert status.hint == "", "the hint is for the normal panel"
        await pilot.press("escape")
        assert panel_labels(screen) == ["wait-for never"]
        clock.advance(31)
        app.screen.tick()
        assert status.hint == ""
        await type_text(pilot, "/subagents")
        await pilot.press("enter")
        assert panel_labels(screen) == ["wait-for never"], "/subagents lists only the last 30 s"
        await type_text(pilot, "a")  # typing leaves the panel
        assert app.focused is screen.composer and screen.composer.value == "a"
        await pilot.press("ctrl+u")
        await type_text(pilot, "/subagents all")
        await pilot.press("enter")
        assert len(screen.panel.lines) == 2 and screen.panel.mode == "all"


async def test_a_failed_row_stays_30s_then_leaves(daemon):
    clock = FakeClock()
    app = make_app(daemon, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        root = daemon.spawn("spawn fail broken on purpose\nwait-for never", title="root")
        screen = await open_job(pilot, app, root)
        await until(pilot, lambda: [line.row.state.value for line in screen.panel.lines] == ["failed"], "failed row")
        clock.freeze()  # its 30 s count by advance only from here, not by a loaded machine's seconds
        clock.advance(20)
        app.screen.tick()
        assert len(screen.panel.lines) == 1
        clock.advance(11)
        app.screen.tick()
        assert screen.panel.lines == [] and not screen.panel.display
        assert screen.query_one("#status").hint == "", "no hint for a failed row: it stayed in view"


async def test_down_without_subagents_says_so(daemon):
    job = daemon.spawn("say alone")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        await type_text(pilot, "/subagents")
        await pilot.press("enter")
        assert "no subagents to show" in notice(app)
        assert app.focused is screen.composer


async def test_the_footer_lists_the_keys_that_work_where_the_focus_is(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen), "the agent view")
        assert set(shown_keys(app)) == {"n", "w", "A", "slash", "colon", "question_mark", "q"}, \
            "no row: nothing to open, message, pin, stop"
        screen, _ = await open_tree(pilot, app, daemon)
        keys = shown_keys(app)
        assert keys["enter"] == "send" and keys["escape"] == "back" and keys["down"] == "subagents"
        assert "K" not in keys and "x" not in keys
        await pilot.press("down")
        keys = shown_keys(app)
        assert keys["enter"] == "open" and keys["escape"] == "leave panel"
        assert {"m", "x", "K", "down"} <= set(keys) and keys["down"] == "move"
        await pilot.press("escape", "escape")
        assert set(shown_keys(app)) >= {"enter", "n", "m", "p", "K", "a", "slash", "q"}


# ------------------------------------------------------------------------------------------- config


def test_a_theme_that_does_not_exist_is_refused(daemon):
    with pytest.raises(ConfigError) as info:
        RoostApp(DaemonSource(daemon.paths), Config(theme="textual-lite"))
    assert "did you mean 'textual-light'" in str(info.value)


async def test_a_theme_change_redraws_the_rows_in_its_colours(daemon):
    job = daemon.spawn("ask which branch?")
    daemon.wait_state(job, "waiting")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: job in table_ids(app), "the row")
        dark = app.screen.table.get_cell(job, "title").style.color
        app.theme = "textual-light"
        await until(pilot, lambda: app.screen.table.get_cell(job, "title").style.color != dark, "new colours")


def test_roost_refuses_to_open_on_a_theme_that_does_not_exist(daemon_factory):
    daemon = daemon_factory('theme = "textual-lite"')
    done = subprocess.run([str(Path(sys.executable).parent / "roost")], env=daemon.env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1
    assert "key 'theme'" in done.stderr and "did you mean 'textual-light'" in done.stderr


async def test_the_app_says_so_when_the_daemon_goes_away_and_comes_back_with_it(daemon):
    job = daemon.spawn("say still here", title="survivor")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await open_job(pilot, app, job)
        await until(pilot, lambda: daemon.show(job)["attached"], "the job open")
        daemon.stop()
        await until(pilot, lambda: "lost the daemon" in notice(app), "the notice")
        try:
            # The app starts a daemon again by itself, and opens the job on it again.
            await until(pilot, lambda: daemon_running(daemon.paths.socket) and daemon.show(job)["attached"],
                        "the job attached on the new daemon", timeout=20)
            newcomer = daemon.spawn("say hello again", title="newcomer")
            await until(pilot, lambda: newcomer in app.link.rows, "a job spawned after the restart")
        finally:
            if daemon_running(daemon.paths.socket):
                daemon.call("shutdown")


async def test_the_theme_comes_from_the_config(daemon):
    app = make_app(daemon, 'theme = "textual-light"')
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == "textual-light"
        assert not app.current_theme.dark


async def test_enter_on_a_closed_job_resumes_it(daemon):
    job = daemon.spawn("say earlier\nreport done first", title="sleeper")
    daemon.wait_state(job, "done")
    daemon.call("close", job=job)
    daemon.wait_row(job, lambda r: r["reaped"] and not r["worker_up"], what="the worker closed")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        daemon.wait_row(job, lambda r: r["worker_up"], what="the resume on open")
        assert "earlier" in transcript_text(screen)
        assert daemon.show(job)["state"] == "done", "resuming starts the worker; it runs no turn by itself"


async def test_text_typed_in_a_burst_behind_n_and_m_lands_in_the_box(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen), "the agent view")
        await burst(pilot, app, "n", *"say early", "ctrl+s")
        job = (await until(pilot, lambda: jobs(daemon), "the new job"))[0]["id"]
        assert daemon.show(job)["title"] == "say early"
        await until(pilot, lambda: job in table_ids(app) and daemon.show(job)["state"] == "idle", "its row")
        await burst(pilot, app, "m", *"say later", "enter")
        daemon.wait_for(lambda: "later" in daemon.texts(job), what="the message's turn")
        assert isinstance(app.screen, AgentViewScreen), "the Enter that sent it opened nothing"


async def test_the_transcript_loads_the_newest_entries_and_pages_back_at_the_top(daemon):
    job = daemon.spawn("\n".join(f"say line {n}" for n in range(300)))
    daemon.wait_state(job, "idle", timeout=20)
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        lines = transcript_text(screen).splitlines()
        assert "line 299" in lines and "line 0" not in lines, "tail first: one page, the newest"
        assert screen.transcript.more_before
        screen.transcript.scroll_home(animate=False)
        await until(pilot, lambda: "line 0" in transcript_text(screen).splitlines(), "older pages", timeout=20)
        lines = transcript_text(screen).splitlines()
        assert [line for line in lines if line.startswith("line ")] == [f"line {n}" for n in range(300)]


async def test_closing_a_job_screen_ends_its_subscriptions(daemon):
    root = daemon.spawn("spawn wait-for never\nsay parent", title="parent")
    child = daemon.wait_for(lambda: daemon.children(root), what="a child")[0]["id"]
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await open_job(pilot, app, root)
        await until(pilot, lambda: child in app.link.rows, "the child's row, from the subtree")
        await pilot.press("escape")
        await until(pilot, lambda: child not in app.link.rows, "the subtree's rows gone with the screen")
        assert root in app.link.rows, "the agent view still holds the root"
