"""The Textual app: a client of the daemon that shows its jobs and sends it what a person asks for.

The app owns the link to the daemon and pumps its events to every open screen; the screens
decide what to show, and each keeps its own tick. Every key goes through the key router, one
at a time and in order. Time comes from the clock given to the constructor, so views that say
"12s" or expire after 30 s can be tested with a fake clock.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from textual import events, work
from textual.app import App

from roost import paths as paths_mod
from roost.client import ClientError
from roost.config import Config, ConfigError, load_config
from roost.models import State
from roost.rules.views import agent_view_rows, newly_notable
from roost.tui.agent_view import AgentViewScreen
from roost.tui.daemon_link import DaemonLink, JobSource, LinkUpdate, default_source
from roost.tui.escape_keys import use_escape_first_parser
from roost.tui.job_screen import JobScreen
from roost.tui.key_router import KeyRouter
from roost.tui.notify import Notifier
from roost.tui.roost_screen import JobClosed, RoostScreen

#: Seconds between attempts to reach the daemon again after losing it.
RECONNECT_SECONDS = 1.0


class RoostApp(App[None]):
    """The agent view first; a job screen on top for each job opened."""

    CSS_PATH = "app.tcss"
    TITLE = "roost"
    ENABLE_COMMAND_PALETTE = False

    def __init__(self, source: JobSource, config: Config | None = None, clock: Callable[[], float] = time.time,
                 select: str | None = None) -> None:
        super().__init__()
        self.link = DaemonLink(source)
        self.config = config or Config()
        self.clock = clock
        self._select = select
        #: Each listed row's state when the app last looked (None before the first look).
        self._states: dict[str, State] | None = None
        self.router = KeyRouter(self)
        self.notifier = Notifier(self.config.notify_via, self.config.notify_interval, clock,
                                 lambda text: self._write_to_terminal(text), lambda: self.bell(), "TMUX" in os.environ)
        self.config.check_theme(self.available_themes)
        self.theme = self.config.theme

    def on_mount(self) -> None:
        self.push_screen(AgentViewScreen(self.link, self.config, self.clock, select=self._select))
        self._pump()

    async def on_unmount(self) -> None:
        await self.link.source.close()

    def _roost_screens(self) -> list[RoostScreen]:
        return [screen for screen in self.screen_stack if isinstance(screen, RoostScreen)]

    # -- the daemon's events --------------------------------------------------------------------------
    @work(exclusive=True, group="daemon")
    async def _pump(self) -> None:
        """Subscribe to the agent view, then hand each batch of events to every open screen.
        When the connection ends (a restart, an upgrade, or the daemon dropped us for falling
        behind), say so and connect again — starting the daemon if need be — and let every open
        job screen subscribe again."""
        inline = self.config.agent_view_subagents == "inline"
        reconnecting = False
        while True:
            try:
                update = await self.link.connect(inline=inline)
            except ClientError as exc:
                self._tell_lost(f"{exc.message}; trying again")
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            if reconnecting:
                for screen in self.screen_stack:
                    if isinstance(screen, JobScreen):
                        screen.follow()
            self._notify()
            self._tell_changed(update)
            async for batch in self.link.batches():
                update = self.link.apply(batch)
                if update.rows:
                    self._notify()
                self._tell_changed(update)
            self._tell_lost(f"{self.link.source.end_reason()}; reconnecting")
            reconnecting = True
            await asyncio.sleep(RECONNECT_SECONDS)

    def _tell_changed(self, update: LinkUpdate) -> None:
        for screen in self._roost_screens():
            screen.post_message(DaemonLink.Changed(update))

    def _tell_lost(self, reason: str) -> None:
        for screen in self._roost_screens():
            screen.post_message(DaemonLink.Lost(reason))

    def _notify(self) -> None:
        """Tell the person outside the app when a listed job starts to need them, fails or
        finishes, as ``notify`` asks (roost/tui/notify.py says how and when). Jobs that were so
        before the app opened say nothing."""
        rows = [item.row for item in agent_view_rows(self.link.rows.values(), self.config.agent_view_subagents)]
        news = newly_notable(self._states, rows, self.config.notify)
        self._states = {row.id: row.state for row in rows}
        self.notifier.tell(news)

    def on_app_focus(self) -> None:
        self.notifier.focused = True

    def on_app_blur(self) -> None:
        self.notifier.focused = False

    def _write_to_terminal(self, sequence: str) -> None:
        """Bytes for the terminal itself (Textual has no public call for an OSC; ``bell`` writes the same way)."""
        if self._driver is not None:
            self._driver.write(sequence)

    # -- keys ----------------------------------------------------------------------------------------
    async def on_event(self, event: events.Event) -> None:
        """Keys go to the key router (in order, against the focus each key finds); a paste where
        no text box has the focus goes where typing goes. Everything else is Textual's."""
        if isinstance(event, events.Key) and await self.router.key(event):
            return
        if isinstance(event, events.Paste) and not event.is_forwarded and self.router.paste(event):
            return
        await super().on_event(event)

    # -- what screens ask for -------------------------------------------------------------------------
    def on_job_closed(self, message: JobClosed) -> None:
        self._release(message.job_id, message.subs)

    @work(group="release")
    async def _release(self, job_id: str, subs: tuple[int, ...]) -> None:
        """A job screen closed: end its subscriptions and tell the daemon the job is not open here."""
        self._tell_changed(await self.link.unsubscribe(subs))
        try:
            await self.link.call("release", job=job_id)
        except ClientError:
            pass  # the daemon forgets a gone connection's open jobs by itself


def run_app(config: str | None = None, select: str | None = None) -> None:
    """Open the app on this environment's daemon (``roost`` and ``roost demo`` call this)."""
    try:
        settings = load_config(paths_mod.config_file(config))
        app = RoostApp(default_source(config), settings, select=select)
    except ConfigError as exc:
        raise SystemExit(f"roost: {exc}") from None
    use_escape_first_parser()
    app.run()
