"""What the agent view and the job screen share: the link to the daemon, the clock and its tick,
the status line and footer, requests that say what they did, and where typed text goes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer

from roost.client import ClientError
from roost.config import Config
from roost.models import Row
from roost.tui.approval_keys import ShownApprovals, answer, key_target
from roost.tui.daemon_link import DaemonLink, LinkUpdate
from roost.tui.fit_footer import FitFooter
from roost.tui.dialogs import PromptBox
from roost.tui.double_press import DoublePress
from roost.tui.help_screen import HelpScreen
from roost.tui.job_message import JobMessage
from roost.tui.looks import Palette
from roost.tui.status_line import StatusLine
from roost.tui.store_banner import StoreBanner

#: How long after the moment a time-dependent text changes the screen draws it (a timer may
#: wake a little early; this makes sure the new text is there to draw).
TICK_SLACK = 0.02


class JobClosed(JobMessage):
    """A job's screen closed: the app ends its subscriptions ``subs`` and tells the daemon the
    job is no longer open here."""

    def __init__(self, job_id: str, subs: tuple[int, ...]) -> None:
        super().__init__(job_id)
        self.subs = subs


def plural(n: int, noun: str) -> str:
    """``1 job``, ``3 jobs``: notices count things."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def send_outcome(row: Row, result: dict[str, Any]) -> str:
    """What a person reads after a message went to a job, from the daemon's outcome."""
    outcome = result.get("outcome")
    title = row.job.title
    if outcome == "queued":
        return f"queued for {title}: it gets your message when its turn ends"
    if outcome == "resumed":
        return f"resumed {title} with your message"
    if outcome == "restarted":
        return f"restarted {title} with your message"
    if outcome == "denied":
        return f"denied {title}'s request: your message is the reason it hears"
    return f"sent to {title}"


def stopped_text(ids: list[str]) -> str:
    """What a stop of a tree did, from the ids the daemon stopped."""
    return f"stopped {plural(len(ids), 'job')}" if ids else "nothing was running"


class RoostScreen(Screen[None]):
    """A screen of the app: fed the link's changes by the app, ticked by its own timer only when
    something it shows changes with time (``next_change``): an idle screen runs no timer."""

    BINDINGS = [
        Binding("question_mark", "help", "help", key_display="?"), Binding("f1", "help", show=False),
        # Shown only where the focus shows an approval (``answer_place``): roost/tui/approval_keys.py.
        Binding("y", "answer('once')", "approve", key_display="y"),
        Binding("Y", "answer('job')", "approve for job", key_display="Y"),
        Binding("N", "answer('deny')", "deny", key_display="N"),
    ]

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float]) -> None:
        super().__init__()
        self.link = link
        self.config = config
        self.clock = clock
        self.palette: Palette | None = None
        self.stop_press = DoublePress(clock, config.double_press_window)
        self.status = StatusLine(id="status")
        #: When the key whose binding runs now was made (the key router sets it; None otherwise),
        #: and when the focus last moved: an approval key answers what was on screen then.
        self.key_time: float | None = None
        self.focus_since = time.monotonic()
        #: Which approval each place of the screen shows, since when (the screen keeps it current).
        self.shown = ShownApprovals()
        self.banner = StoreBanner()
        self._tick_timer: Timer | None = None

    def compose_bottom(self) -> ComposeResult:
        yield self.banner
        yield self.status
        yield FitFooter(compact=True)

    def on_mount(self) -> None:
        self.palette = Palette.from_variables(self.app.get_css_variables())
        # Both belong to this screen: Textual ends them when it unmounts, so no tick or theme
        # change ever reaches a screen that is not there.
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)
        self.arm_tick()
        self.banner.show(self.link.store_notice)

    def on_descendant_focus(self) -> None:
        self.focus_since = time.monotonic()

    def on_screen_resume(self) -> None:
        self.focus_since = time.monotonic()

    def _theme_changed(self, _theme: object) -> None:
        self.palette = Palette.from_variables(self.app.get_css_variables())
        self.restyle()

    # -- what subclasses fill in -----------------------------------------------------------------
    def rows_changed(self, update: LinkUpdate) -> None:
        """Bring the view up to date with the link's rows and new timeline entries."""

    def tick(self) -> None:
        """The clock moved on: refresh whatever shows a time or expires with time."""

    def next_change(self, now: float) -> float | None:
        """Seconds until something this screen shows changes with time alone (an age, a row's
        lifetime; roost/rules/ticks.py), or None: then no timer runs until the rows change."""
        return None

    def arm_tick(self) -> None:
        """(Re)set the one timer to the next time-dependent change, or to none."""
        if self._tick_timer is not None:
            self._tick_timer.stop()
        delay = self.next_change(self.clock())
        self._tick_timer = None if delay is None else self.set_timer(delay + TICK_SLACK, self._ticked, name="tick")

    def _ticked(self) -> None:
        self._tick_timer = None
        self.tick()
        self.arm_tick()

    def restyle(self) -> None:
        """The theme changed: draw again with the new palette."""

    def on_daemon_link_changed(self, message: DaemonLink.Changed) -> None:
        self.banner.show(self.link.store_notice)
        self.rows_changed(message.update)
        self.arm_tick()

    def on_daemon_link_lost(self, message: DaemonLink.Lost) -> None:
        self.status.say(f"lost the daemon: {message.reason}", error=True)

    # -- typing (the app's key router asks) ----------------------------------------------------------
    def single_press_keys(self) -> frozenset[str]:
        """Printable keys that act only when pressed alone where the focus is now; typed in a
        burst they are text (the subagent panel's ``x``, ``m``, ``K``)."""
        return frozenset()

    def answer_place(self) -> str | None:
        """Where the focus shows an approval now (a place of ``shown``), or None: the keys that
        answer one work only there."""
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "answer":
            return self.answer_place() is not None
        return super().check_action(action, parameters)

    def action_answer(self, decision: str) -> None:
        """``y``, ``Y``, ``N``: answer the approval the focused place showed when the key was made."""
        place = self.answer_place()
        if place is not None:
            answer(self, key_target(self.shown, place, self.key_time, self.focus_since), decision)

    def take_text(self, text: str) -> bool:
        """Text typed or pasted where no text box has the focus: put it where typing goes, or
        say False (the agent view takes none: its letters are keys)."""
        return False

    # -- requests ----------------------------------------------------------------------------------
    @work(group="requests")
    async def request(self, op: str, args: dict[str, Any], then: Callable[[Any], str | None]) -> None:
        """Ask the daemon; say what came of it, or the daemon's words when it refused."""
        try:
            result = await self.link.call(op, **args)
        except ClientError as exc:
            self.status.say(exc.message, error=True)
            return
        text = then(result)
        if text:
            self.status.say(text)

    def write_to(self, row: Row) -> None:
        """Ask for a message and send it to ``row``'s job (a done or closed job resumes)."""

        def send(text: str | None) -> None:
            if text:
                self.request("send", {"job": row.id, "text": text}, lambda result: send_outcome(row, result))

        self.app.push_screen(PromptBox(f"Message {row.job.title} [{row.id}]", "what to tell it"), send)

    def action_help(self) -> None:
        """``?``: the keys that work here, from the bindings active where the focus is."""
        self.app.push_screen(HelpScreen(self))

    def rename(self, row: Row) -> None:
        """Ask for a new title for ``row``'s job (the old one to edit) and give it to the daemon."""

        def rename(title: str | None) -> None:
            if title and title != row.job.title:
                self.request_rename(row, title)

        self.app.push_screen(PromptBox(f"Rename {row.job.title} [{row.id}]", "its new title", row.job.title,
                                       verb="rename"), rename)

    def request_rename(self, row: Row, title: str) -> None:
        self.request("rename", {"job": row.id, "title": title}, lambda result: f"renamed {row.id} to {result['title']}")

    def stop_twice(self, target: str, what: str, stop: Callable[[], None]) -> None:
        """``K K``: the first press says what a second one would stop; the second stops it."""
        if self.stop_press.press(target):
            stop()
        else:
            window = self.stop_press.window
            self.status.say(f"press K again within {window:g} s to stop {what}", seconds=window)
