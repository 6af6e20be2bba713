"""Reading a transcript while it streams, timestamps, and what finished and failed rows say."""

from __future__ import annotations

from textual import events

from roost.tui.job_screen import JobScreen

from tui_helpers import SIZE, cell, make_app, notice, open_job, table_ids, transcript_text, type_text, until


def status_hint(screen: JobScreen) -> str:
    return screen.query_one("#status").hint


async def test_scrolled_up_the_transcript_stays_counts_new_lines_and_end_follows_again(daemon):
    job = daemon.spawn("\n".join(f"say line {n}" for n in range(80)), title="talker")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        log = screen.transcript
        await until(pilot, lambda: log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y, "the end in view")
        await pilot.press("pageup")
        await until(pilot, lambda: not log.following, "the view left the tail")
        where = log.scroll_y
        daemon.call("send", job=job, text="say more one\nsay more two")
        await until(pilot, lambda: "more two" in transcript_text(screen), "the streamed lines")
        await until(pilot, lambda: log.unread >= 2, "the count of new lines")
        assert log.scroll_y == where, "it stayed where the person reads"
        assert status_hint(screen).startswith(f"↓ {log.unread} new")
        await pilot.press("end")  # the composer is empty: End is the screen's
        await until(pilot, lambda: log.following and log.scroll_y == log.max_scroll_y, "following again")
        assert log.unread == 0 and status_hint(screen) == ""
        daemon.call("send", job=job, text="say after end")
        await until(pilot, lambda: "after end" in transcript_text(screen), "another line")
        await until(pilot, lambda: log.scroll_y == log.max_scroll_y, "the tail followed")


async def test_a_burst_of_page_keys_moves_that_many_pages_each_at_once(daemon):
    """PgUp and PgDn are not animated: the view is where the key puts it when the next key comes
    (an animated page went on moving for frames after the key, and a second one began halfway)."""
    job = daemon.spawn("\n".join(f"say line {n}" for n in range(200)), title="talker")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        app.animation_level = "full"  # as in a terminal (tests run with animations off)
        screen = await open_job(pilot, app, job)
        log = screen.transcript
        await until(pilot, lambda: log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y, "the end in view")
        end, page = log.scroll_y, log.scrollable_content_region.height
        assert end > 4 * page, "room for the pages"
        for key in ("pageup", "pageup", "pageup", "pagedown"):  # one burst: no wait between the keys
            app.post_message(events.Key(key, None))
        await until(pilot, lambda: log.scroll_y == end - 2 * page and not log.following, "two pages up, settled")


async def test_end_in_a_composer_with_text_moves_its_cursor_first(daemon):
    job = daemon.spawn("\n".join(f"say line {n}" for n in range(80)))
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        await pilot.press("pageup")
        await until(pilot, lambda: not screen.transcript.following, "scrolled up")
        await type_text(pilot, "abc")
        await pilot.press("home", "end")
        assert screen.composer.cursor_position == 3 and not screen.transcript.following
        await pilot.press("end")
        await until(pilot, lambda: screen.transcript.following, "following")


async def test_ctrl_t_shows_and_hides_timestamps(daemon):
    job = daemon.spawn("say stamped")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        assert "stamped" in transcript_text(screen).splitlines()
        await pilot.press("ctrl+t")
        line = next(line for line in transcript_text(screen).splitlines() if line.endswith(" stamped") and "›" not in line)
        assert line[2] == ":" and line[5] == ":" and line[8:] == " stamped"
        await pilot.press("ctrl+t")
        assert "stamped" in transcript_text(screen).splitlines()


async def test_a_failed_job_says_why_on_its_row_and_in_the_header(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        job = daemon.spawn("fail broken on purpose", title="breaker")
        await until(pilot, lambda: job in table_ids(app) and "failed" in cell(app, job, "state"), "failed")
        reason = daemon.show(job)["reason"]
        assert reason and reason[:20] in cell(app, job, "activity")
        assert "1 failed" in str(app.screen.query_one("#topbar").render())
        assert "failed" not in notice(app), "the row and the header say it; nothing pops up"


async def test_failures_notify_by_bell_and_osc_as_the_config_asks(daemon):
    app = make_app(daemon, 'notify = ["failed"]\nnotify_via = ["bell", "osc9"]')
    rings: list[int] = []
    written: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        app.bell = lambda: rings.append(1)  # type: ignore[method-assign]
        app._write_to_terminal = written.append  # type: ignore[method-assign]
        asker = daemon.spawn("ask which branch?", title="asker")
        await until(pilot, lambda: asker in table_ids(app) and "waiting" in cell(app, asker, "state"), "waiting")
        await pilot.pause(0.2)
        assert rings == [] and written == [], "needs_input is not in notify"
        job = daemon.spawn("fail broken on purpose", title="breaker")
        await until(pilot, lambda: written, "the OSC 9 notification")
        assert rings == [1]
        assert written[0].startswith("\x1b]9;breaker [" + job + "] failed") and written[0].endswith("\x07")


async def test_queued_jobs_show_as_queued_with_a_count(daemon_factory):
    daemon = daemon_factory("max_running_jobs = 1")
    first = daemon.spawn("wait-for never", title="first")
    daemon.wait_state(first, "working")
    second = daemon.spawn("wait-for never", title="second")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: second in table_ids(app), "the queued row")
        assert "queued" in cell(app, second, "state")
        assert "1 queued" in str(app.screen.query_one("#topbar").render())


async def test_a_queued_message_shows_until_the_prompt_that_delivers_it(daemon):
    go = daemon.home / "go"  # its turn lasts until the test has seen the message queued
    job = daemon.spawn(f"run while [ ! -e {go} ]; do sleep 0.05; done", title="busy")
    daemon.wait_state(job, "working")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        await type_text(pilot, "say later")
        await pilot.press("enter")
        await until(pilot, lambda: "⋯ queued for its next turn: say later" in transcript_text(screen), "the queued line")
        go.touch()
        await until(pilot, lambda: "› say later" in transcript_text(screen), "the delivering prompt", timeout=15)
        assert "queued for its next turn" not in transcript_text(screen)
        await until(pilot, lambda: "later" in transcript_text(screen).splitlines(), "its turn")
