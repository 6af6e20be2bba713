"""The agent view's table: its columns for a width, and rows keyed by job id."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from roost.tui.looks import STATE_CELL_WIDTH


#: Tables narrower than this show the state by its marks only.
NARROW = 70
#: The state column of a narrow table: the worker dot, a space, the state symbol.
MARKS_WIDTH = 3
#: The activity column's least share: what a row asks, or why it failed, starts here.
ACTIVITY_MIN = 24
#: The shortest title: a title gives way first, down to this.
TITLE_MIN = 8


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int


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


class JobTable(DataTable[Text]):
    """The agent view's table: a row per job, keyed by job id."""

    # The screen opens the job at once, so keys typed right behind Enter reach the job's screen.
    BINDINGS = [Binding("enter", "screen.open", "open")]

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """Every column here has a fixed width and every row one line, so no cell needs measuring:
        DataTable measures every cell of every new row (a console's options each time), which
        was most of drawing a 1,000-row agent view (docs/performance.md, "The app")."""
        if any(column.auto_width for column in self.columns.values()) or any(
                self.rows[key].label is not None or self.rows[key].auto_height for key in new_rows if key in self.rows):
            super()._update_dimensions(new_rows)
            return
        width = sum(column.get_render_width(self) for column in self.columns.values()) + self._row_label_column_width
        self.virtual_size = Size(width, self._total_row_height + (self.header_height if self.show_header else 0))

    class Scrolled(Message):
        """Other rows came into view: their ages may be older than the last tick drew them."""

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.post_message(self.Scrolled())

    def visible_ids(self) -> list[str]:
        """The job ids of the rows in view now (every row is one line high)."""
        header = self.header_height if self.show_header else 0
        top, height = round(self.scroll_y), max(self.scrollable_content_region.height - header, 0)
        return [row.key.value for row in self.ordered_rows[top: top + height] if row.key.value is not None]

    def selected_id(self) -> str | None:
        """The job under the cursor as the table is now (not as a queued message says)."""
        if self.row_count == 0:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
