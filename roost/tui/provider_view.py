"""A read-only view of one of the agent's own subagents (Claude Code's ``Task``).

It is not a roost job: what it shows is its parent's ``subagent`` timeline entries for it (what it
was asked, what it said, how it ended), kept by the parent's subagent panel. There is no composer
and no stop: stopping the parent's turn is how it stops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import RichLog, Static

from roost.config import Config
from roost.rules.provider_subagents import READ_ONLY_HINT, ProviderRow
from roost.rules.row_text import age_seconds, format_age
from roost.rules.ticks import next_age_change
from roost.tui.daemon_link import DaemonLink, LinkUpdate
from roost.tui.looks import state_text
from roost.tui.roost_screen import RoostScreen
from roost.tui.subagent_panel import SubagentPanel

#: How each entry's state reads in the view.
_WORDS = {"done": "✓ done", "failed": "✗ failed", "stopped": "■ stopped"}


def entry_line(entry: dict[str, Any], first: bool) -> Text:
    """One ``subagent`` entry as a line: the first says what it was asked, the last how it ended."""
    data = entry.get("data") or {}
    state = str(data.get("state") or "working")
    word = _WORDS.get(state, "asked" if first else "said")
    line = Text(f"{word}: ", style="bold")
    line.append(str(data.get("text") or ""))
    return line


class ProviderView(RoostScreen):
    """One provider subagent's entries, live, read-only; ``escape`` goes back to its parent."""

    DEFAULT_CSS = """
    ProviderView #provider-bar { height: 1; padding: 0 1; }
    ProviderView #provider-log { height: 1fr; padding: 0 1; }
    """
    BINDINGS = [Binding("escape", "back", "back")]

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float], parent_title: str,
                 source: Callable[[], ProviderRow | None]) -> None:
        super().__init__(link, config, clock)
        self.parent_title = parent_title
        self.source = source
        self.bar = Static(id="provider-bar")
        self.log_view = RichLog(wrap=True, markup=False, id="provider-log")
        self._written = 0
        self.row: ProviderRow | None = None

    @classmethod
    def of(cls, screen: RoostScreen, panel: SubagentPanel, ident: str) -> ProviderView:
        """The view of subagent ``ident`` of ``panel``'s open job, kept current from that panel."""
        parent = screen.link.rows.get(panel.open_job)
        return cls(screen.link, screen.config, screen.clock, parent.job.title if parent else panel.open_job,
                   lambda: next((row for row in panel.provider if row.id == ident), None))

    def compose(self) -> ComposeResult:
        yield self.bar
        yield self.log_view
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.status.hint = READ_ONLY_HINT
        self.draw()

    def draw(self) -> None:
        """Show the subagent as its parent's panel holds it now: new entries are appended."""
        row = self.source() or self.row  # gone from the parent (it closed): keep what was shown
        if row is None or self.palette is None:
            return
        self.row = row
        bar = Text(no_wrap=True, overflow="ellipsis", end="")
        bar.append(f"{self.parent_title} › ", style=self.palette.muted)
        bar.append(row.job.title, style="bold")
        bar.append("  ")
        bar.append_text(state_text(row, self.palette))
        bar.append(f"  ·  {format_age(age_seconds(row, self.clock()))} · the agent's own subagent, read-only",
                   style=self.palette.muted)
        self.bar.update(bar)
        for number, entry in enumerate(row.entries[self._written:], start=self._written):
            self.log_view.write(entry_line(entry, number == 0))
        self._written = len(row.entries)

    def lines(self) -> list[str]:
        """What the view says, as plain lines (tests read it)."""
        return [strip.text for strip in self.log_view.lines]

    def rows_changed(self, update: LinkUpdate) -> None:
        self.draw()

    def tick(self) -> None:
        self.draw()

    def next_change(self, now: float) -> float | None:
        return next_age_change([self.row], now) if self.row is not None else None

    def restyle(self) -> None:
        self.draw()

    def action_back(self) -> None:
        self.dismiss()
