"""Input that can't hurt: keys in a burst (all queued before the app handles the first) go where
the focus is when each one is handled, and nothing acts that the person did not mean.

Each test asserts on the daemon's records (nothing archived, stopped or sent) and on the screen.
"""

from __future__ import annotations

from textual import events

from roost.config import Config
from roost.models import State
from roost.tui.app import RoostApp
from roost.tui.agent_view import AgentViewScreen
from roost.tui.dialogs import ConfirmBox, PromptBox
from roost.tui.job_screen import JobScreen

from conftest import DaemonHarness
from tui_helpers import SIZE, FakeClock, answer, burst, keys_of, make_app, notice, open_job, press_alone, select_row, until
from test_tui_pilot import open_tree
from test_tui_snapshots import NOW, FixedRows, row


def untouched(daemon: DaemonHarness, job: str) -> None:
    """Nothing happened to ``job`` that a person would have had to ask for."""
    row = daemon.show(job)
    assert row["archived_at"] is None
    assert row["state"] != "stopped"
    assert not any(e["kind"] == "message" for e in daemon.timeline(job))


async def test_text_typed_behind_enter_lands_in_the_opened_jobs_composer(daemon):
    root = daemon.spawn("spawn wait-for never\nwait-for never", title="tree")
    daemon.wait_for(lambda: daemon.children(root), what="a child")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, root)
        await burst(pilot, app, "enter", *keys_of("say hi"))
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, "the job screen")
        await until(pilot, lambda: screen.composer.value == "say hi", "the text in the composer")
        assert app.focused is screen.composer
        assert [type(s).__name__ for s in app.screen_stack[1:]] == ["AgentViewScreen", "JobScreen"], "no dialog opened"
        untouched(daemon, root)
        assert all(c["state"] == "working" for c in daemon.children(root))


async def test_a_confirmation_ignores_keys_typed_before_it_appeared(daemon):
    job = daemon.spawn("say keep me", title="keeper")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await burst(pilot, app, "a", "y", "enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmBox), "the question")
        await pilot.pause(0.2)
        assert isinstance(app.screen, ConfirmBox), "the y and Enter typed ahead did not answer it"
        untouched(daemon, job)
        await answer(pilot, "n")
        assert isinstance(app.screen, AgentViewScreen)
        untouched(daemon, job)


async def test_panel_keys_in_a_burst_are_text_for_the_composer(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, root = await open_tree(pilot, app, daemon)
        ids = [line.row.id for line in screen.panel.lines]
        for text in ("xray the logs", "make it so", "Kafka"):
            await pilot.press("down")
            assert app.focused is screen.panel
            await burst(pilot, app, *keys_of(text))
            await until(pilot, lambda: screen.composer.value == text, f"{text!r} in the composer")
            assert app.focused is screen.composer and app.screen is screen, "no message box opened"
            await pilot.press("ctrl+u")
        await pilot.pause(0.3)
        for job in (root, *ids):
            untouched(daemon, job)


async def test_a_paste_in_the_panel_lands_whole_in_the_composer(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, root = await open_tree(pilot, app, daemon)
        await pilot.press("down")
        app.post_message(events.Paste("xmK pasted"))
        await until(pilot, lambda: screen.composer.value == "xmK pasted", "the paste in the composer")
        for line in screen.panel.lines:
            untouched(daemon, line.row.id)


async def test_K_K_in_a_burst_in_the_panel_is_still_the_double_press(daemon):
    app = make_app(daemon, clock=FakeClock())
    async with app.run_test(size=SIZE) as pilot:
        screen, root = await open_tree(pilot, app, daemon)
        await pilot.press("down")
        await burst(pilot, app, "K", "K")
        await until(pilot, lambda: notice(app) == "stopped 3 subagents", "the stop")
        assert daemon.show(root)["state"] == "working"


async def test_a_single_x_after_the_window_acts(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        first = screen.panel.lines[0].row.id
        await pilot.press("down")
        await press_alone(pilot, "x")
        daemon.wait_state(first, "stopped")
        assert screen.composer.value == ""


async def test_text_typed_behind_m_in_the_panel_lands_in_the_message_box(daemon):
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen, _ = await open_tree(pilot, app, daemon)
        await pilot.press("down")
        await press_alone(pilot, "m")
        box = await until(pilot, lambda: isinstance(app.screen, PromptBox) and app.screen, "the message box")
        await burst(pilot, app, *keys_of("say ok"))
        await until(pilot, lambda: box.box.value == "say ok", "the text in the box")


async def test_a_closed_screen_gets_no_more_ticks(daemon):
    job = daemon.spawn("say hello")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        ticks: list[float] = []
        screen._draw_jobbar = lambda: ticks.append(1.0)  # type: ignore[method-assign]  # each tick draws it
        await until(pilot, lambda: ticks, "a tick while it is open", timeout=3)
        await pilot.press("escape")
        ticks.clear()
        await pilot.pause(1.5)
        assert ticks == [], "its interval went with it"


async def test_enter_and_text_with_180_jobs_neither_archives_nor_crashes():
    """FixedRows refuses any op but reads (an archive would fail the test)."""
    rows = [row(f"j{n:03d}", f"job {n}", State.WORKING, age=n + 1.0, descendants=1, running=1) for n in range(180)]
    rows += [row(f"c{n:03d}", f"child {n}", State.WORKING, parent=f"j{n:03d}") for n in range(180)]
    source = FixedRows(rows, {})
    app = RoostApp(source, Config(), clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen) and app.screen.table.row_count == 180,
                    "180 rows")
        await burst(pilot, app, "enter", *keys_of("say hi"))
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, "the job screen")
        await until(pilot, lambda: screen.composer.value == "say hi", "the text in the composer")
        await pilot.pause(1.2)  # a tick or more: every screen ticks only while it is mounted
        assert app.is_running and app.screen is screen
        assert not isinstance(app.screen, ConfirmBox)
