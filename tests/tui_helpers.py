"""Helpers the app's tests share: a fake clock, an app on a test daemon, waiting, reading the screen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual import events
from textual.pilot import Pilot

from roost.config import parse_config
from roost.tui.agent_view import AgentViewScreen
from roost.tui.app import RoostApp
from roost.tui.daemon_link import DaemonSource
from roost.tui.dialogs import FRESH_KEYS_GRACE
from roost.tui.job_screen import JobScreen
from roost.tui.key_router import SINGLE_PRESS_WINDOW

from conftest import WAIT, DaemonHarness

SIZE = (120, 40)


class FakeClock:
    """The app's clock: the real time (the daemon stamps rows with it), moved on by hand."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.stopped_at: float | None = None

    def __call__(self) -> float:
        return (time.time() if self.stopped_at is None else self.stopped_at) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def freeze(self) -> None:
        """Stop at now: from here the clock moves only by ``advance``, so the seconds a loaded
        machine takes between two steps of a test count for nothing in a time rule it checks."""
        self.stopped_at = time.time()


def make_app(daemon: DaemonHarness, config: str = "", clock: Callable[[], float] = time.time,
             select: str | None = None) -> RoostApp:
    return RoostApp(DaemonSource(daemon.paths), parse_config(config, "test.toml"), clock=clock, select=select)


async def until(pilot: Pilot, predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    """Let the app run until ``predicate`` holds (never a blind sleep); ``WAIT`` is conftest's."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await pilot.pause(0.05)


def jobs(daemon: DaemonHarness) -> list[dict[str, Any]]:
    """Every job's row, oldest first (one page: these tests make a handful)."""
    return daemon.call("list")["rows"]


def table_ids(app: RoostApp) -> list[str]:
    screen = app.screen
    assert isinstance(screen, AgentViewScreen)
    return screen.table.keys()


def cell(app: RoostApp, job: str, column: str) -> str:
    screen = app.screen
    assert isinstance(screen, AgentViewScreen)
    return screen.table.get_cell(job, column).plain


def notice(app: RoostApp) -> str:
    return app.screen.query_one("#status").notice


def transcript_text(screen: JobScreen) -> str:
    return "\n".join(strip.text for strip in screen.transcript.lines)


def panel_labels(screen: JobScreen) -> list[str]:
    return [line.label for line in screen.panel.lines]


def shown_keys(app: RoostApp) -> dict[str, str]:
    """What the footer lists now: key -> description."""
    return {key: binding.description for key, (_, binding, enabled, _) in app.screen.active_bindings.items()
            if binding.show and enabled}


async def select_row(pilot: Pilot, app: RoostApp, job: str) -> None:
    await until(pilot, lambda: job in table_ids(app), f"{job} in the agent view")
    app.screen.table.move_cursor(row=table_ids(app).index(job))
    await pilot.pause()


async def open_job(pilot: Pilot, app: RoostApp, job: str) -> JobScreen:
    await select_row(pilot, app, job)
    await pilot.press("enter")
    screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.job_id == job and app.screen,
                         f"the job screen of {job}")
    # Loaded, and drawn: the transcript draws what came in a moment later (DRAW_EVERY), which a
    # loaded machine can stretch past the next line of a test.
    await until(pilot, lambda: screen.loaded and not screen.transcript._undrawn, "the transcript to load and draw")
    return screen


async def type_text(pilot: Pilot, text: str) -> None:
    await pilot.press(*[" " if ch == " " else ch for ch in text])


async def press_alone(pilot: Pilot, key: str) -> None:
    """A key pressed on its own: where a burst would make it text, it acts once the window passed."""
    await pilot.press(key)
    await pilot.pause(SINGLE_PRESS_WINDOW + 0.1)


CHARACTERS = {"space": " ", "slash": "/", "colon": ":"}


async def answer(pilot: Pilot, key: str) -> None:
    """A key pressed once a confirmation has been on screen long enough to be read."""
    await pilot.pause(FRESH_KEYS_GRACE + 0.05)
    await pilot.press(key)


def keys_of(text: str) -> list[str]:
    """The key names a terminal sends for ``text``."""
    return ["space" if ch == " " else ch for ch in text]


async def burst(pilot: Pilot, app: RoostApp, *keys: str) -> None:
    """Keys as a terminal sends them: all queued before the app handles the first one."""
    for key in keys:
        app.post_message(events.Key(key, CHARACTERS.get(key, key if len(key) == 1 else None)))
    await pilot.pause()
