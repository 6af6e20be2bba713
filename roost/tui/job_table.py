"""The agent view's table: its columns for a width, and rows keyed by job id (roost/tui/row_table.py
draws only the rows in view)."""

from __future__ import annotations

from textual.binding import Binding

from roost.rules.views import AgentViewRow
from roost.tui.looks import STATE_CELL_WIDTH
from roost.tui.row_table import Column, RowTable

__all__ = ["ACTIVITY_MIN", "Column", "JobTable", "MARKS_WIDTH", "NARROW", "TITLE_MIN", "table_columns"]


#: Tables narrower than this show the state by its marks only.
NARROW = 70
#: The state column of a narrow table: the worker dot, a space, the state symbol.
MARKS_WIDTH = 3
#: The activity column's least share: what a row asks, or why it failed, starts here.
ACTIVITY_MIN = 24
#: The shortest title: a title gives way first, down to this.
TITLE_MIN = 8


def table_columns(width: int, usage: bool) -> list[Column]:
    """The agent view's columns for a table ``width`` cells wide.

    The id always stays (it is what every command takes), and the state (by its marks alone,
    ``● ?``, below NARROW cells). The title gives way first: it takes what is left once the
    activity column — what a row asks, why it failed — has half the rest or ACTIVITY_MIN cells,
    up to 20, 26 or 32 cells as the table widens. Usage (when some job has any) gets a column of
    its own only on wide tables, and is shown in the activity column otherwise.
    """
    wide = width >= 110 and usage
    state = Column("state", "", MARKS_WIDTH) if width < NARROW else Column("state", "state", STATE_CELL_WIDTH)
    fixed = [state, Column("id", "id", 6), Column("age", "age", 4)]
    if wide:
        fixed.append(Column("usage", "usage", 18))
    rest = width - sum(c.width + 2 for c in fixed) - 4  # cell padding, the table's edge, a scrollbar
    most = 32 if width >= 110 else 26 if width >= 90 else 20
    title = max(min(most, rest - 2 - max(rest // 2, ACTIVITY_MIN)), TITLE_MIN)
    return [*fixed[:2], Column("title", "job", title), fixed[2],
            Column("activity", "activity", max(rest - title - 2, 10)), *fixed[3:]]


class JobTable(RowTable[AgentViewRow]):
    """The agent view's table: a row per job, keyed by job id; the screen says what its cells read."""

    # The screen opens the job at once, so keys typed right behind Enter reach the job's screen.
    BINDINGS = [Binding("enter", "screen.open", "open")]
