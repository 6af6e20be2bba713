"""``U`` on the agent view: what jobs spent — today, each of the last 7 days and by job tree, the
biggest first — read from the daemon's ``usage`` operation and worded as `roost usage` words it
(roost/rules/usage_words.py). ``r`` reads it again; Esc goes back."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from roost.client import ClientError
from roost.config import Config
from roost.rules.usage_words import report_lines
from roost.tui.daemon_link import DaemonLink
from roost.tui.roost_screen import RoostScreen

#: The days the screen looks back.
USAGE_DAYS = 7


class UsageScreen(RoostScreen):
    """The usage report in a scrolling body under the top bar."""

    CSS_PATH = "agent_view.tcss"
    BINDINGS = [
        Binding("r", "reload", "read again"),
        Binding("escape", "back", "back"),
    ]

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float]) -> None:
        super().__init__(link, config, clock)
        self.topbar = Static(Text(f"roost  ·  usage, the last {USAGE_DAYS} days", style="bold"), id="topbar")
        self.body = Static("reading…", id="usage-report")

    def compose(self) -> ComposeResult:
        yield self.topbar
        with VerticalScroll():
            yield self.body
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.load()

    @work(group="usage", exclusive=True)
    async def load(self) -> None:
        try:
            report = await self.link.call("usage", days=USAGE_DAYS)
        except ClientError as exc:
            self.status.say(exc.message, error=True)
            return
        self.body.update(Text("\n".join(report_lines(report))))

    def action_reload(self) -> None:
        self.load()

    def action_back(self) -> None:
        self.dismiss()
