"""The block above a job screen's composer while the job waits on approvals: the oldest one
whole (what will run, exactly; the model's words beside it), and how many more wait.

``↑`` from the composer selects it; then ``y``, ``Y`` and ``N`` answer it (the job screen's keys,
roost/tui/approval_keys.py), ``↑``/``↓`` scroll a long one (``↓`` at its end, or ``Esc``, goes back
to the composer). Typing selects the composer again, the text in it.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.markup import escape
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from roost.tui.approval_text import APPROVAL_MARK, Approval, approval_text
from roost.tui.looks import Palette


class ApprovalBlock(VerticalScroll):
    """Shows what ``show`` was given; the job screen keeps it current and answers from it."""

    BINDINGS = [
        Binding("up", "scroll_up", "scroll", show=False),
        Binding("down", "down_or_leave", show=False),
    ]

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.body = Static()
        self.shown: Approval | None = None
        self._count = 0
        #: What the shown one was drawn with: the title of the agent's own subagent that asks (it
        #: comes with the timeline, after the row) and the palette (the theme can change).
        self._drawn: tuple[str | None, Palette] | None = None
        self.display = False

    def compose(self) -> ComposeResult:
        yield self.body

    def show(self, approvals: tuple[Approval, ...], palette: Palette, subagents: Mapping[str, str]) -> None:
        """The oldest of ``approvals`` whole (none: the block goes); ``subagents`` names the
        agent's own subagents by id."""
        self._count = len(approvals)
        self.display = bool(approvals)
        first = approvals[0] if approvals else None
        drawn = (subagents.get(first.subagent), palette) if first is not None else None
        if first is not None and (first != self.shown or drawn != self._drawn):
            self.body.update(approval_text(first, palette, subagents=subagents))
            if first != self.shown:
                self.scroll_home(animate=False)
        self.shown, self._drawn = first, drawn
        self._title()

    def _title(self) -> None:
        """The tool, how many more wait, and the keys (they answer only while the block has the focus)."""
        if self.shown is None:
            return
        more = f" · {self._count - 1} more after it" if self._count > 1 else ""
        keys = "y approve · Y approve for this job · N deny" if self.has_focus else "↑ to answer"
        self.border_title = escape(f"{APPROVAL_MARK} {self.shown.tool} asks{more} · {keys}")

    def watch_has_focus(self) -> None:
        self._title()

    def action_down_or_leave(self) -> None:
        """``↓`` scrolls; at the end it is the screen's (back to the composer)."""
        if self.scroll_y >= self.max_scroll_y:
            raise SkipAction()
        self.scroll_down(animate=False)
