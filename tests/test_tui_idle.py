"""An idle app runs no timer: the screens tick only when something they show changes with time
(roost/rules/ticks.py). Counted in timer ticks, not in time, so a busy machine cannot fool it."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from textual.timer import Timer

from roost.tui.agent_view import AgentViewScreen

from tui_helpers import FakeClock, make_app, open_job, table_ids, until, cell


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every timer tick of the app, by the timer's name and where it runs."""
    counted: Counter[str] = Counter()
    original = Timer._tick

    async def tick(self: Timer, *, next_timer: float, count: int) -> None:
        counted[f"{self.name}@{type(self.target).__name__}"] += 1
        await original(self, next_timer=next_timer, count=count)

    monkeypatch.setattr(Timer, "_tick", tick)
    return counted


def stopped_jobs(daemon, count: int) -> list[str]:
    """Finished jobs: their ages (run times) no longer change."""
    ids = [daemon.spawn("work 30", title=f"job {i}") for i in range(count)]
    for job in ids:
        daemon.wait_state(job, "working")
        daemon.call("stop", job=job)
    for job in ids:
        daemon.wait_state(job, "stopped")
    return ids


def closed_jobs(daemon, count: int) -> list[str]:
    """Stopped jobs whose workers are closed: the rows the agent view keeps only a window of."""
    ids = stopped_jobs(daemon, count)
    for job in ids:
        daemon.call("close", job=job)
    daemon.wait_for(lambda: all(daemon.show(job)["pid"] is None for job in ids), what="the workers closed")
    return ids


async def test_an_idle_agent_view_runs_no_timer(daemon, ticks):
    ids = stopped_jobs(daemon, 3)
    app = make_app(daemon, clock=FakeClock())
    async with app.run_test() as pilot:
        await until(pilot, lambda: set(table_ids(app)) == set(ids), "the stopped jobs listed")
        await pilot.pause(0.5)
        ticks.clear()
        # Measuring idleness over a window is the point, so this one pause stays: a loaded machine
        # only makes the window longer, and nothing may tick in it however long it is.
        await pilot.pause(3.0)  # before: two 1 s intervals ticked here (6), each redrawing every row
        assert ticks == Counter(), f"an app with nothing changing ticked: {ticks}"


async def test_a_live_row_ticks_only_when_its_age_text_changes(daemon, ticks):
    job = daemon.spawn("work 300", title="live")
    daemon.wait_state(job, "working")
    clock = FakeClock()
    app = make_app(daemon, clock=clock)
    async with app.run_test() as pilot:
        await until(pilot, lambda: table_ids(app) == [job], "the live job listed")
        ticks.clear()
        started = time.monotonic()
        await until(pilot, lambda: ticks["tick@AgentViewScreen"] >= 1, "a tick as its age in seconds moves on")
        await pilot.pause(2.5)  # a window to count ticks in: that they stay one a second is the point
        most = time.monotonic() - started + 1.5  # one per second that passed (however long that took)
        assert ticks["tick@AgentViewScreen"] <= most, "under a minute old, its age reads in seconds"
        clock.advance(120)  # "2m" now: the next change is a minute away
        app.screen.tick()
        app.screen.arm_tick()
        assert cell(app, job, "age") == "2m"
        ticks.clear()
        await pilot.pause(2.5)
        assert ticks["tick@AgentViewScreen"] == 0, f"{ticks}"


async def test_an_idle_job_screen_runs_no_tick(daemon, ticks):
    job = stopped_jobs(daemon, 1)[0]
    app = make_app(daemon, clock=FakeClock())
    async with app.run_test() as pilot:
        await until(pilot, lambda: table_ids(app) == [job], "the job listed")
        await open_job(pilot, app, job)
        await pilot.pause(0.5)
        ticks.clear()
        await pilot.pause(3.0)
        # The composer's cursor blinks (Textual's Input, twice a second) and the screen draws it: nothing else.
        others = {name: n for name, n in ticks.items() if not name.endswith("@Composer") and name != "screen_update@JobScreen"}
        assert others == {}, f"an open job with nothing changing ticked: {others}"


async def test_only_rows_in_view_tick_and_a_row_scrolled_into_view_shows_its_age_now(daemon, ticks):
    live = daemon.spawn("work 300", title="live")
    daemon.wait_state(live, "working")
    finished = stopped_jobs(daemon, 12)  # newer: listed above the live one, pushing it out of view
    clock = FakeClock()
    app = make_app(daemon, clock=clock)
    async with app.run_test(size=(100, 14)) as pilot:
        screen = app.screen
        assert isinstance(screen, AgentViewScreen)
        await until(pilot, lambda: len(table_ids(app)) == 13, "every job listed")
        assert live not in screen.table.visible_ids() and finished[-1] in screen.table.visible_ids()
        ticks.clear()
        await pilot.pause(2.5)
        assert ticks["tick@AgentViewScreen"] == 0, "the only growing age is out of view"
        clock.advance(125)
        await pilot.press("G")
        await until(pilot, lambda: live in screen.table.visible_ids(), "the live row in view")
        await until(pilot, lambda: cell(app, live, "age") == "2m", "its age drawn as it is now")


async def test_the_agent_view_holds_at_most_its_window_of_finished_rows(daemon):
    kept_live = daemon.spawn("work 300", title="live")
    daemon.wait_state(kept_live, "working")
    app = make_app(daemon, clock=FakeClock())
    async with app.run_test() as pilot:
        app.link.window = 3
        await until(pilot, lambda: table_ids(app) == [kept_live], "the live job listed")
        first = closed_jobs(daemon, 3)
        await until(pilot, lambda: set(table_ids(app)) == {kept_live, *first}, "three finished: at the window")
        assert app.link.more == 0
        later = closed_jobs(daemon, 2)
        await until(pilot, lambda: set(table_ids(app)) == {kept_live, first[2], *later}, "the two oldest let go")
        assert set(app.link.rows) == {kept_live, first[2], *later}, "the link holds no more than it lists"
        assert app.link.more == 2
        await until(pilot, lambda: "2 older not listed" in str(app.screen.topbar.render()), "counted as older")
