"""Space on the agent view: the selected job's last entries (and what it asks: its pending
approvals exactly, or its question) in a pane under the table, without opening the job."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.text import Text
from textual.widgets import Static

from roost.models import Row
from roost.rules.row_text import asked
from roost.tui.approval_text import APPROVAL_MARK, PEEK_DIFF_LINES, approval_text, row_approvals
from roost.tui.looks import BOLD, Palette
from roost.tui.entry_text import entry_text

#: How many of the newest timeline entries a peek reads.
PEEK_ENTRIES = 12


class PeekPane(Static):
    """Shows what ``show_entries`` was given; the screen fetches them (``logs``, newest page)."""

    #: The ids of the approvals the pane shows (the screen peeks again when the row's change).
    approvals: tuple[str, ...] = ()

    def show_entries(self, row: Row, entries: list[dict[str, Any]], palette: Palette) -> None:
        """The job's newest entries, oldest first, the lines that fit (the newest last)."""
        self.border_title = escape(f"{row.job.title} [{row.id}] · {row.state.value}")
        self.approvals = tuple(approval.id for approval in row_approvals(row))
        out = Text(no_wrap=False, end="")
        for entry in entries:
            text = entry_text(entry, palette)
            if text is not None:
                out.append_text(text)
                out.append("\n")
        room = max(self.size.height - 1, 3) if self.size.height else 8
        asks = list(self._asks(row, palette).split("\n")) if asked(row) or self.approvals else []
        keep = max(room - len(asks), 0)  # what it asks always shows (its first lines, if that is all that fits)
        lines = [*(out.split("\n")[-keep:] if keep else []), *asks][:room]
        shown = Text("\n", end="").join(lines)
        self.update(shown if shown.plain.strip() else Text("nothing said yet", style=palette.muted))

    def _asks(self, row: Row, palette: Palette) -> Text:
        """What the job waits on: each pending approval exactly (what will run, the model's words
        beside it), or its question."""
        pending = row_approvals(row)
        if not pending:
            return Text(f"it asks you: {asked(row)}", style=palette.warning + BOLD)
        out = Text(end="")
        for number, approval in enumerate(pending):
            if number:
                out.append("\n")
            out.append(f"{APPROVAL_MARK} {approval.tool} · ", style=palette.warning + BOLD)
            out.append_text(approval_text(approval, palette, diff_lines=PEEK_DIFF_LINES))
        return out
