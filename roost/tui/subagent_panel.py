"""The subagent panel: the open job's subagents as a tree, above the composer.

Which rows it shows comes from ``roost.rules.views.panel_rows``; the panel keeps its own view
state (mode, hidden rows, the row under the cursor, by job id). The keys that act on the
selected row (open, message, stop or hide) are the job screen's, which opens what they open at
once, so keys typed behind them reach what opened; ``↑`` on the top row is the screen's too
(``SkipAction``).

The agent's own subagents (Claude Code's ``Task``) come from the open job's ``subagent`` timeline
entries (``take_entries``), as read-only rows among its children
(``roost.rules.provider_subagents``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from rich.markup import escape
from rich.text import Text
from textual.actions import SkipAction
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from roost.models import STOPPABLE_STATES, Row
from roost.rules.provider_subagents import ProviderRow, is_provider, provider_rows
from roost.rules.row_text import activity_text, age_seconds, format_age
from roost.rules.row_tree import RowTree
from roost.rules.views import PanelRow, filter_rows, panel_rows
from roost.tui.approval_text import Approval, row_approvals, row_line
from roost.tui.looks import Palette, state_marks


def fit_label(line: PanelRow, width: int) -> str:
    """The row's label in ``width`` cells: the tree prefix and ``(+N)`` stay, the title is cut."""
    if len(line.label) <= width:
        return line.label
    suffix = f" (+{line.plus})" if line.plus else ""
    room = max(width - len(line.prefix) - len(suffix), 1)
    return line.prefix + line.row.job.title[: room - 1] + "…" + suffix


#: The panel's id column: a job id (4 to 8 characters) whole; the agent's own subagents' longer ids cut.
ID_WIDTH = 8


def fit_id(job_id: str, width: int) -> str:
    """An id in ``width`` cells (the rows it tells apart share a title: three ``work 600``)."""
    return job_id if len(job_id) <= width else job_id[: width - 1] + "…"


class SubagentPanel(Widget, can_focus=True):
    """The open job's subagents; the cursor row is the one keys act on."""

    COMPONENT_CLASSES = {"subagent-panel--cursor"}
    BINDINGS = [
        Binding("up", "cursor(-1)", "up", show=False),
        Binding("down", "cursor(1)", "move", key_display="↑↓"),
    ]

    class Moved(Message):
        """The cursor moved to another row (the footer says what that row allows)."""

    mode: reactive[str] = reactive("normal")
    cursor: reactive[str | None] = reactive(None)
    #: The panel's filter (``/`` in the panel): words of the title or id, ``s:STATE``.
    filter_text: reactive[str] = reactive("")

    def __init__(self, open_job: str, clock: Callable[[], float], lifetime: float, id: str | None = None) -> None:
        super().__init__(id=id)
        self.open_job = open_job
        self.clock = clock
        self.lifetime = lifetime
        self.hidden: set[str] = set()
        self.lines: list[PanelRow] = []
        self.palette: Palette | None = None
        #: The rows the panel was given, as a tree kept by the rows each update names, with the
        #: agent's own subagents in it; and the open job's own row.
        self.row_tree = RowTree()
        self._open_row: Row | None = None
        #: The open job's ``subagent`` timeline entries, by ``seq``.
        self._entries: dict[int, dict[str, Any]] = {}
        #: The agent's own subagents, as rows (every one, whatever the panel shows).
        self.provider: list[ProviderRow] = []
        self._index = 0
        #: The rows the panel was last laid out to show (its height).
        self._height = 0
        #: The row ``x`` stopped under the cursor: when it sorts down among the finished rows, the
        #: cursor stays at its place, on the row that takes it (a second ``x`` stops the next).
        self._let_go: str | None = None

    # -- what it shows ------------------------------------------------------------------------------
    def show_rows(self, rows: Mapping[str, Row], changed: Collection[str] | None = None) -> None:
        """Take the current rows (all of them, by id; the rule picks this job's subagents). With
        ``changed``, only those rows differ from the ones last given: only they are looked at."""
        if changed is None:
            self.row_tree, self.provider = RowTree(rows.values()), []
        else:
            for job_id in changed:
                self.row_tree.put(job_id, rows.get(job_id))
        self._open_row = rows.get(self.open_job)
        self.recompute()

    def take_entries(self, entries: Iterable[dict[str, Any]]) -> None:
        """Keep the open job's ``subagent`` entries among ``entries``; redraw when one is new."""
        new = {entry["seq"]: entry for entry in entries
               if entry.get("kind") == "subagent" and entry.get("job") == self.open_job
               and entry.get("seq") not in self._entries}
        if new:
            self._entries.update(new)
            self.recompute()

    def recompute(self) -> None:
        """Apply the rule again (rows changed, time passed, the mode or hidden rows changed)."""
        parent = self._open_row
        for row in self.provider:
            self.row_tree.put(row.id, None)
        self.provider = provider_rows(self._entries.values(), parent) if parent is not None else []
        for row in self.provider:
            self.row_tree.put(row.id, row)
        lines = panel_rows(self.row_tree, self.open_job, self.clock(), self.mode, frozenset(self.hidden), self.lifetime)
        kept = {row.id for row in filter_rows((line.row for line in lines), self.filter_text)} if self.filter_text else None
        self.lines = [line for line in lines if kept is None or line.row.id in kept]
        ids = [line.row.id for line in self.lines]
        if self._let_go is not None and self.cursor == self._let_go and self._let_go in ids \
                and ids.index(self._let_go) != self._index:
            self._let_go = None
            self.cursor = ids[min(self._index, len(ids) - 1)]
        if self.cursor is not None and self.cursor not in ids:
            # the row under the cursor left: stay at the same place in the list
            self.cursor = ids[min(self._index, len(ids) - 1)] if ids else None
        height = min(len(self.lines), self.max_rows())
        self.display = bool(self.lines)
        self._update_title()
        # The screen is laid out again only when the panel's height changes: a row that changed
        # in place (what a running subagent said) repaints the panel alone.
        self.refresh(layout=height != self._height)
        self._height = height

    def watch_mode(self) -> None:
        self.recompute()

    def watch_filter_text(self) -> None:
        self.recompute()

    def watch_cursor(self, cursor: str | None) -> None:
        if cursor != self._let_go:
            self._let_go = None  # the person moved on
        ids = [line.row.id for line in self.lines]
        if cursor in ids:
            self._index = ids.index(cursor)
        self.post_message(self.Moved())
        self._update_title()
        self.refresh()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def selected(self) -> PanelRow | None:
        """The row under the cursor, as the panel shows it now."""
        return next((line for line in self.lines if line.row.id == self.cursor), None)

    def approvals_of(self, row: Row) -> tuple[Approval, ...]:
        """A row's pending approvals: a subagent job's own; the agent's own subagent's are the open
        job's that name it (``subagent``)."""
        if not is_provider(row):
            return row_approvals(row)
        parent = self._open_row
        return tuple(a for a in row_approvals(parent) if a.subagent == row.id) if parent is not None else ()

    def select_first(self) -> None:
        self.cursor = self.lines[0].row.id if self.lines else None

    def select_last(self) -> None:
        self.cursor = self.lines[-1].row.id if self.lines else None

    def max_rows(self) -> int:
        """How many rows fit: about a quarter of the screen, at least three."""
        return max(3, self.app.size.height // 4)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return min(len(self.lines), self.max_rows())

    def _window(self) -> tuple[int, list[PanelRow]]:
        """The rows that fit, scrolled so the cursor row is among them."""
        shown = self.max_rows()
        start = min(max(self._index - shown + 1, 0), max(len(self.lines) - shown, 0)) if self.cursor else 0
        return start, self.lines[start:start + shown]

    def render(self) -> Text:
        palette = self.palette
        if palette is None or not self.lines:
            return Text()
        width = self.content_size.width
        start, window = self._window()
        id_width = min(max(len(line.row.id) for line in window), ID_WIDTH)
        label_width = min(max(len(line.label) for line in window), max(width * 2 // 5, 12))
        now = self.clock()
        out = Text(no_wrap=True, overflow="ellipsis", end="")
        for number, line in enumerate(window):
            row = line.row
            marked = row.id == self.cursor and self.has_focus
            text = Text(no_wrap=True, overflow="ellipsis", end="")
            text.append("› " if marked else "  ")
            text.append(f"{state_marks(row)} ", style=palette.for_state(row.state))
            text.append(f"{fit_id(row.id, id_width):<{id_width}}  ", style=palette.muted)
            text.append(f"{fit_label(line, label_width):<{label_width}}  ", style=palette.text)
            text.append(f"{row.state.value:<8}", style=palette.for_state(row.state))
            text.append(f"{format_age(age_seconds(row, now)):>4}  ", style=palette.muted)
            approvals = self.approvals_of(row)
            if is_provider(row) and not approvals:
                text.append("read-only · ", style=palette.muted)
            if approvals:
                text.append(row_line(approvals, max(width - text.cell_len, 1)), style=palette.warning)
            else:
                said, failed = activity_text(row, max(width - text.cell_len, 0))
                text.append(said, style=palette.error if failed else palette.muted)
            if marked:
                text.pad_right(width - text.cell_len)
                text.stylize(self.get_component_rich_style("subagent-panel--cursor"))
            if number:
                out.append("\n")
            out.append_text(text)
        return out

    def _update_title(self) -> None:
        """What the panel lists, and how many rows lie below the ones that fit."""
        running = sum(line.row.state in STOPPABLE_STATES for line in self.lines)
        title = {"normal": f"subagents · {running} running",
                 "recent": f"subagents · {running} running, and those finished in the last {self.lifetime:g}s",
                 "all": "all subagents"}[self.mode]
        start, window = self._window()
        more = len(self.lines) - start - len(window)
        shown = f" · filter: {self.filter_text}" if self.filter_text else ""
        self.border_title = escape(title + shown + (f" · {more} more ↓" if more > 0 else ""))

    # -- keys -----------------------------------------------------------------------------------------
    def action_cursor(self, step: int) -> None:
        ids = [line.row.id for line in self.lines]
        index = ids.index(self.cursor) + step if self.cursor in ids else 0
        if index < 0:
            raise SkipAction()  # ↑ at the top: the screen takes the focus back to the composer
        self.cursor = ids[min(index, len(ids) - 1)]

    def let_go(self, job_id: str) -> None:
        """``x`` stopped the row under the cursor: the cursor does not follow it down."""
        self._let_go = job_id

    def hide(self, job_id: str) -> None:
        """``x`` on a finished row: it leaves the panel now, not when its lifetime runs out."""
        self.hidden.add(job_id)
        self.recompute()
