"""The job screen's top line: where the job sits, its title, id, state, age, subagents and usage."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from roost.models import Row
from roost.rules.row_text import age_seconds, format_age, usage_text
from roost.rules.views import subagent_counts
from roost.tui.looks import Palette, state_text
from roost.tui.roost_screen import plural


class JobBar(Static):
    """On a narrow terminal the usage, the path and then the title give way, never the id, the
    state or the counts."""

    def show(self, row: Row, path: list[str], palette: Palette, now: float, width: int) -> None:
        """Draw ``row`` under the titles above it (``path``, root first) in ``width`` cells."""
        tail = Text(f"  {row.id}  ", style=palette.muted)
        tail.append_text(state_text(row, palette))
        details = [format_age(age_seconds(row, now))]
        subagents, running = subagent_counts(row)  # the agent's own subagents count too, as at home
        if subagents:
            details.append(f"{plural(subagents, 'subagent')} ({running} running)")
        tail.append("  ·  " + " · ".join(details), style=palette.muted)
        head = Text(no_wrap=True, overflow="ellipsis", end="")
        for title in path:
            head.append(f"{title} › ", style=palette.muted)
        head.append(row.job.title, style="bold")
        room = width - tail.cell_len
        usage = f" · {usage_text(row)}" if usage_text(row) else ""
        if head.cell_len + len(usage) <= room:  # usage gives way before the path and the title
            tail.append(usage, style=palette.muted)
            room -= len(usage)
        if head.cell_len > room:  # the path goes first, then the title is cut
            head = Text(row.job.title, style="bold")
            head.truncate(max(room, 4), overflow="ellipsis")
        bar = Text(no_wrap=True, overflow="ellipsis", end="")
        bar.append_text(head)
        bar.append_text(tail)
        self.update(bar)
