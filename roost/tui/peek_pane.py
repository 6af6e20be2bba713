"""Space on the agent view: the selected job's last entries (and its question, if it asks one)
in a pane under the table, without opening the job."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.text import Text
from textual.widgets import Static

from roost.models import Row
from roost.rules.row_text import asked
from roost.tui.looks import BOLD, Palette
from roost.tui.entry_text import entry_text

#: How many of the newest timeline entries a peek reads.
PEEK_ENTRIES = 12


class PeekPane(Static):
    """Shows what ``show_entries`` was given; the screen fetches them (``logs``, newest page)."""

    def show_entries(self, row: Row, entries: list[dict[str, Any]], palette: Palette) -> None:
        """The job's newest entries, oldest first, the lines that fit (the newest last)."""
        self.border_title = escape(f"{row.job.title} [{row.id}] · {row.state.value}")
        out = Text(no_wrap=False, end="")
        for entry in entries:
            text = entry_text(entry, palette)
            if text is not None:
                out.append_text(text)
                out.append("\n")
        question = asked(row)
        if question:
            out.append(f"it asks you: {question}", style=palette.warning + BOLD)
        lines = out.split("\n")
        room = max(self.size.height - 1, 3) if self.size.height else 8
        shown = Text("\n", end="").join(lines[-room:])
        self.update(shown if shown.plain.strip() else Text("nothing said yet", style=palette.muted))
