"""What the agent view and the job screen share: the link to the daemon, the clock, the status
line and footer, requests that say what they did, and keys typed ahead into a text box."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import events, work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Input

from roost.client import ClientError
from roost.config import Config
from roost.models import Row
from roost.tui.daemon_link import DaemonLink, LinkUpdate
from roost.tui.dialogs import PromptBox
from roost.tui.double_press import DoublePress
from roost.tui.job_message import JobMessage
from roost.tui.looks import Palette
from roost.tui.status_line import StatusLine


class OpenJob(JobMessage):
    """Open a job's screen on top of this one (the app pushes it)."""


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
    return f"sent to {title}"


def stopped_text(ids: list[str]) -> str:
    """What a stop of a tree did, from the ids the daemon stopped."""
    return f"stopped {plural(len(ids), 'job')}" if ids else "nothing was running"


class RoostScreen(Screen[None]):
    """A screen of the app: fed the link's changes and the clock's ticks by the app."""

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float]) -> None:
        super().__init__()
        self.link = link
        self.config = config
        self.clock = clock
        self.palette: Palette | None = None
        self.stop_press = DoublePress(clock)
        self.status = StatusLine(id="status")

    def compose_bottom(self) -> ComposeResult:
        yield self.status
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.palette = Palette.from_variables(self.app.get_css_variables())
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: object) -> None:
        self.palette = Palette.from_variables(self.app.get_css_variables())
        self.restyle()

    # -- what subclasses fill in -----------------------------------------------------------------
    def rows_changed(self, update: LinkUpdate) -> None:
        """Bring the view up to date with the link's rows and new timeline entries."""

    def tick(self) -> None:
        """The clock moved on: refresh whatever shows a time or expires with time."""

    def restyle(self) -> None:
        """The theme changed: draw again with the new palette."""

    def on_daemon_link_changed(self, message: DaemonLink.Changed) -> None:
        self.rows_changed(message.update)

    def on_daemon_link_lost(self, message: DaemonLink.Lost) -> None:
        self.status.say(f"lost the daemon: {message.reason}", error=True)

    # -- keys typed ahead -------------------------------------------------------------------------
    def typing_target(self, event: events.Key) -> Input | None:
        """Where a printable key that no widget took belongs (the app asks, in key order).

        A text box handles every printable key sent to it, so one that gets this far while a
        text box has the focus was sent before that box took the focus: the person typed
        ahead, and the key belongs in the box.
        """
        focused = self.focused
        return focused if isinstance(focused, Input) else None

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

    def stop_twice(self, target: str, what: str, stop: Callable[[], None]) -> None:
        """``K K``: the first press says what a second one would stop; the second stops it."""
        if self.stop_press.press(target):
            stop()
        else:
            self.status.say(f"press K again within 2 s to stop {what}")
