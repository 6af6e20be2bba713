"""What the subagent panel's keys do on the job screen: open, message, rename, diff, stop or hide
the row under the cursor, move to an edge, filter. The job screen binds them (so what they open
opens at once) and offers them only while the panel has the focus (``PANEL_ACTIONS``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost.models import STOPPABLE_STATES
from roost.rules.provider_subagents import is_provider
from roost.tui.diff_view import open_diff
from roost.tui.provider_view import ProviderView

if TYPE_CHECKING:
    from roost.tui.filter_box import FilterBox
    from roost.tui.roost_screen import RoostScreen
    from roost.tui.subagent_panel import SubagentPanel

    _Base = RoostScreen
else:
    _Base = object

#: Actions of the panel: only while it has the focus.
PANEL_ACTIONS = frozenset({"open_subagent", "message_subagent", "rename_subagent", "stop_or_hide", "stop_subagents",
                           "leave_panel", "panel_edge", "panel_filter", "diff_subagent"})
#: Panel actions a provider subagent's (read-only) row does not take.
READ_ONLY_ACTIONS = frozenset({"message_subagent", "rename_subagent", "diff_subagent"})


class PanelKeys(_Base):
    """The panel's row actions, for a screen that has a ``panel``, a ``filter_box`` and ``open_job``."""

    panel: SubagentPanel
    filter_box: FilterBox
    job_id: str

    if TYPE_CHECKING:
        def open_job(self, job_id: str, notice: str = "") -> None:
            """Open ``job_id``'s own job screen over this one (the job screen's)."""

    def action_open_subagent(self) -> None:
        line = self.panel.selected()
        if line is not None and is_provider(line.row):
            self.app.push_screen(ProviderView.of(self, self.panel, line.row.id))
        elif line is not None:
            self.open_job(line.row.id)

    def action_message_subagent(self) -> None:
        line = self.panel.selected()
        if line is not None and not is_provider(line.row):
            self.write_to(line.row)

    def action_rename_subagent(self) -> None:
        line = self.panel.selected()
        if line is not None and not is_provider(line.row):
            self.rename(line.row)

    def action_diff_subagent(self) -> None:
        line = self.panel.selected()
        if line is not None:
            open_diff(self, line.row)

    def action_panel_edge(self, index: int) -> None:
        if index == 0:
            self.panel.select_first()
        else:
            self.panel.select_last()

    def action_panel_filter(self) -> None:
        self.filter_box.add_class("-open")
        self.set_focus(self.filter_box)

    def action_stop_or_hide(self) -> None:
        """``x``: a running row is stopped, a finished one leaves the panel at once."""
        line = self.panel.selected()
        if line is None:
            return
        row = line.row
        if row.state in STOPPABLE_STATES and is_provider(row):  # it stops with its parent's agent
            self.request("stop", {"job": self.job_id}, lambda result: (
                f"stopped {row.job.title}, with the other subagents of the agent's own (and its turn, if one ran)"
                if result["stopped"] else f"{row.job.title} was not running"))
        elif row.state in STOPPABLE_STATES:
            self.panel.let_go(row.id)
            self.request("stop", {"job": row.id},
                         lambda result: f"stopped {row.job.title}" if result["stopped"] else f"{row.job.title} was not running")
        else:
            self.panel.hide(row.id)
            self.status.say(f"hid {row.job.title}: /subagents all still lists it")
