"""What the agent view draws for its rows and its top bar: Rich text from a row, the columns, the
palette and the clock passed in (the table asks for a row's cells only when it draws that row)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.style import Style
from rich.text import Text

from roost.models import NEEDS_INPUT_STATES
from roost.rules.attention import unseen_mark
from roost.rules.counts import WorkCounts, work_parts
from roost.rules.row_text import activity_text, age_seconds, format_age, usage_text
from roost.rules.views import AgentViewRow
from roost.tui.approval_text import APPROVAL_MARK, row_approvals, row_line
from roost.tui.looks import BOLD, STATE_CELL_WIDTH, Palette, cell, state_marks, state_text
from roost.tui.roost_screen import plural
from roost.tui.row_table import Column


def row_cells(item: AgentViewRow, columns: Sequence[Column], palette: Palette, now: float) -> list[Text]:
    """The row's cells in the order of ``columns``."""
    row = item.row
    asks = row.state in NEEDS_INPUT_STATES
    widths = {c.key: c.width for c in columns}
    usage = usage_text(row)
    said, failed = activity_text(row, widths["activity"])
    # Why it failed comes first, so a narrow column keeps the start of the reason.
    activity = [part for part in ((said, item.summary) if failed else (item.summary, said)) if part]
    if usage and "usage" not in widths:
        activity.append(usage)
    tone = palette.error if failed else palette.text if asks else palette.muted
    approvals = row_approvals(row)
    if approvals:  # what it asks to run comes first, and takes what the summary leaves
        room = widths["activity"] - len(item.summary) - 3
        summary = [item.summary] if item.summary and room >= 16 else []
        activity = [row_line(approvals, room if summary else widths["activity"]), *summary]
        tone = palette.warning
    cells = {
        "state": (state_text(row, palette) if widths["state"] >= STATE_CELL_WIDTH
                  else cell(state_marks(row), palette.for_state(row.state))),
        "id": cell(row.id, palette.muted),
        "title": cell(item.prefix + ("• " if unseen_mark(row) else "") + row.job.title,
                      palette.warning + BOLD if asks else palette.text + BOLD if unseen_mark(row) else palette.text),
        "age": age_cell(item, palette, now),
        "activity": cell(" · ".join(activity), tone),
        "usage": cell(usage, palette.muted),
    }
    return [cells[c.key] for c in columns]


def age_cell(item: AgentViewRow, palette: Palette, now: float) -> Text:
    """The age column: the one cell that changes with time alone."""
    return cell(format_age(age_seconds(item.row, now)), palette.muted)


#: The top bar's word when the daemon's jobs run without walls (docs/isolation.md): never silently.
UNSANDBOXED = "jobs NOT sandboxed: roost daemon status says why"


def topbar_text(counts: Mapping[str, int], approvals: int, work: WorkCounts, palette: Palette, more: int,
                filter_text: str, found: int, found_of: int | None, unsandboxed: bool) -> Text:
    """What needs you first (jobs without walls, failed, asking, approvals), then the counts: a narrow
    terminal cuts the bar at its end, so "NOT sandboxed" is the last word it may lose. "Working" and "queued" are
    the daemon's counts (``work``, roost/rules/counts.py): every job, subagents too, as ``roost
    daemon status`` says them; the rest (``counts``, ``header_counts`` of the rows listed, and the
    ``approvals`` they ask) the agent view keeps by the rows that changed (roost/rules/view_model.py)."""
    asking = counts["needs you"]
    working, *queued = work_parts(work)
    parts: list[tuple[object, str, Style | str]] = [
        (unsandboxed, UNSANDBOXED, palette.error + BOLD),
        (counts["failed"], f"{counts['failed']} failed", palette.error + BOLD),
        (asking, f"{asking} need{'s' if asking == 1 else ''} you", palette.warning + BOLD),
        (approvals, f"{APPROVAL_MARK} {plural(approvals, 'approval')}", palette.warning + BOLD),
        (True, plural(counts["jobs"], "job"), ""),
        (True, working, ""),
        *((True, text, palette.muted) for text in queued),
        (more, f"{more:,} older not listed: roost ls --all", palette.muted),
        (filter_text, f"filter: {filter_text}", palette.primary),
    ]
    bar = Text("roost", style="bold")
    for shown, text, style in parts:
        if shown:
            bar.append("  ·  ")
            bar.append(text, style=style)
    if filter_text and found_of is not None:  # the filter's text is the bar's last part
        bar.append(f" (the newest {found:,} of {found_of:,} matches: roost ls --all)", style=palette.muted)
    return bar
