"""The line above the footer: what the last action did (or why it was refused), and a hint."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

#: Seconds a notice stays before the line clears itself.
NOTICE_SECONDS = 8.0
#: The most lines a long notice takes.
MAX_LINES = 3


class StatusLine(Static):
    """A notice on the left (``error`` class when it is a refusal), a hint on the right."""

    notice: reactive[str] = reactive("")
    hint: reactive[str] = reactive("")

    def say(self, text: str, error: bool = False, seconds: float = NOTICE_SECONDS) -> None:
        """Show a notice until the next one, or for ``seconds`` (an offer that runs out, like
        "press K again within 2 s", goes when it does)."""
        self.notice = text
        self.set_class(error, "error")
        self.set_timer(seconds, lambda: self._expire(text))

    def _expire(self, text: str) -> None:
        if self.notice == text:
            self.notice = ""
            self.remove_class("error")

    def watch_notice(self) -> None:
        self._show()

    def watch_hint(self) -> None:
        self._show()

    def on_resize(self) -> None:
        self._show()

    def _show(self) -> None:
        """The hint beside the notice when both fit; otherwise the notice alone, wrapped onto
        the lines it needs (up to MAX_LINES): a notice is never cut short."""
        width = self.content_size.width or 80
        lines = 1
        if self.hint and len(self.notice) + len(self.hint) + 2 <= width:
            line = Text(self.notice, no_wrap=True, overflow="ellipsis", end="")
            line.append(" " * (width - line.cell_len - len(self.hint)))
            line.append(self.hint, style="bold")
        elif self.notice:
            line = Text(self.notice, end="")
            lines = min(len(line.wrap(self.app.console, width)), MAX_LINES)
        else:
            line = Text(self.hint, style="bold", no_wrap=True, overflow="ellipsis", end="")
        self.styles.height = lines
        self.update(line)
