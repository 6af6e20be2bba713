"""A table of one-line rows held as data, of which only the lines in view are ever rendered.

DataTable builds and measures every row it is given, and empties every render cache whenever one
cell changes: a 1,000-row agent view took about a second to draw (docs/performance.md, "The
app"). This table keeps its rows as ``(key, item)`` pairs and asks its owner for a row's cells
only when that row is drawn (Textual's Line API: ``render_line``). A Strip per drawn row is kept
until that row's item, the columns, the width or the look change, so updating one row renders
that row alone, and drawing 10,000 rows costs what drawing the screenful in view costs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

Item = TypeVar("Item")

#: Cells are padded by this many spaces on each side (as DataTable pads them).
CELL_PADDING = 1
#: Rendered rows kept: a few screens, so moving the cursor or scrolling back renders little again;
#: the cache is bounded whatever the row count.
CACHED_ROWS = 512


@dataclass(frozen=True)
class Column:
    """A column of fixed width (cells are cut to it with … when longer)."""

    key: str
    label: str
    width: int


class RowTable(ScrollView, Generic[Item], can_focus=True):
    """One line per row under a header line that stays; the cursor row is the one keys act on.

    ``cells(key, item)`` gives a row's cells in column order, and is called only for rows drawn.
    """

    COMPONENT_CLASSES = {"row-table--header", "row-table--cursor"}
    DEFAULT_CSS = """
    RowTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .row-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .row-table--header {
                background-tint: $foreground 5%;
            }
        }
        & > .row-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        & > .row-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    # No descriptions: the screen that holds the table names its keys (the help lists those).
    BINDINGS = [
        Binding("enter", "select", show=False),
        Binding("up", "cursor_up", show=False),
        Binding("down", "cursor_down", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "edge(0)", show=False),
        Binding("end", "edge(-1)", show=False),
    ]

    class RowMessage(Message):
        """About one row of the table, by its key."""

        def __init__(self, table: RowTable[object], key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> RowTable[object]:
            return self.table

    class RowHighlighted(RowMessage):
        """Another row is under the cursor (it moved, or the rows changed under it)."""

    class RowSelected(RowMessage):
        """The cursor row was chosen: Enter, or a click on the row already under the cursor."""

    class Scrolled(Message):
        """Other rows came into view."""

    #: The index of the row under the cursor (0 when there are no rows).
    cursor_row: reactive[int] = reactive(0, init=False)

    def __init__(self, cells: Callable[[str, Item], Sequence[Text]], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._cells_of = cells
        self.columns: list[Column] = []
        self._keys: list[str] = []
        self._items: dict[str, Item] = {}
        self._index: dict[str, int] = {}
        self._strips: LRUCache[str, tuple[object, Strip]] = LRUCache(CACHED_ROWS)
        #: What every cached strip was drawn with (the widget's styles): set on each render pass.
        self._look: tuple[Style, Style, Style] = (Style(), Style(), Style())
        self._header_strip: tuple[object, Strip] | None = None

    # -- the rows, as data -----------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def rows(self) -> dict[str, Item]:
        """The items by key (read only: change them with ``set_rows``)."""
        return self._items

    def keys(self) -> list[str]:
        """The row keys, in order (a copy)."""
        return list(self._keys)

    def get_row_index(self, key: str) -> int:
        return self._index[key]

    def get_cell(self, key: str, column: str) -> Text:
        """The cell as the row would draw now (raises KeyError for an unknown row or column)."""
        keys = [c.key for c in self.columns]
        if column not in keys:
            raise KeyError(column)
        return self._cells_of(key, self._items[key])[keys.index(column)]

    def set_columns(self, columns: Sequence[Column]) -> None:
        """New columns: every row draws again (in view, when it is drawn)."""
        self.columns = list(columns)
        self.clear_cache()
        self._resize()

    def set_rows(self, rows: Iterable[tuple[str, Item]], changed: Collection[str] | None = None) -> None:
        """Make the table hold ``rows`` in this order. A row whose item is equal to the one held
        keeps its rendered line; the cursor stays on its row if that row stays, else at its place.
        With ``changed``, only those rows' items may differ from the ones held, so only they are
        compared (an update of one row of 10,000 compares one)."""
        before = self._keys[self.cursor_row] if self._keys else None
        items = dict(rows)
        keys = list(items)
        for key in items if changed is None else (key for key in changed if key in items):
            old, item = self._items.get(key, None), items[key]
            if old is None or (old is not item and old != item):
                self._strips.discard(key)
        for key in self._items.keys() - items.keys():
            self._strips.discard(key)
        moved = keys != self._keys
        self._keys, self._items = keys, items
        if moved:
            self._index = {key: number for number, key in enumerate(keys)}
            self._resize()
        self.refresh()  # unchanged rows in view come from the cache
        if before in self._index:
            self.move_cursor(row=self._index[before])
        else:
            self.move_cursor(row=self.cursor_row)
            if self._keys:
                self.post_message(self.RowHighlighted(self, self._keys[self.cursor_row]))

    def refresh_row(self, key: str) -> None:
        """Draw one row again (its text depends on something besides its item: the clock)."""
        self._strips.discard(key)
        if key in self._index:
            self.refresh_line(self._index[key] + 1)

    def clear_cache(self) -> None:
        """Every row draws again (the look changed)."""
        self._strips.clear()
        self._header_strip = None
        self.refresh()

    def _resize(self) -> None:
        width = sum(column.width + 2 * CELL_PADDING for column in self.columns)
        self.virtual_size = Size(width, len(self._keys) + 1)

    # -- the cursor and what is in view ----------------------------------------------------------------
    def selected_id(self) -> str | None:
        """The key of the row under the cursor, None with no rows."""
        return self._keys[self.cursor_row] if self._keys else None

    def _page(self) -> int:
        """How many rows fit under the header."""
        return max(self.scrollable_content_region.height - 1, 0)

    def visible_ids(self) -> list[str]:
        """The keys of the rows in view now."""
        top = round(self.scroll_y)
        return self._keys[top: top + self._page()]

    def validate_cursor_row(self, row: int) -> int:
        return min(max(row, 0), max(len(self._keys) - 1, 0))

    def watch_cursor_row(self, old: int, new: int) -> None:
        self.refresh_line(old + 1)
        self.refresh_line(new + 1)
        self._scroll_to_cursor()
        if self._keys:
            self.post_message(self.RowHighlighted(self, self._keys[new]))

    def move_cursor(self, *, row: int) -> None:
        """Put the cursor on row ``row`` (clamped to the rows) and scroll it into view."""
        self.cursor_row = row
        self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        top, page, row = round(self.scroll_y), self._page(), self.cursor_row
        if page and row < top:
            self.scroll_to(y=row, animate=False, force=True)
        elif page and row >= top + page:
            self.scroll_to(y=row - page + 1, animate=False, force=True)

    def on_resize(self) -> None:
        """A smaller screen keeps the cursor row in view (a larger one shows more above it)."""
        self._scroll_to_cursor()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self.post_message(self.Scrolled())

    def action_cursor_up(self) -> None:
        self.cursor_row -= 1

    def action_cursor_down(self) -> None:
        self.cursor_row += 1

    def action_page(self, pages: int) -> None:
        self.cursor_row += pages * max(self._page() - 1, 1)

    def action_edge(self, index: int) -> None:
        """The first row (0) or the last (-1)."""
        if self._keys:
            self.cursor_row = index % len(self._keys)

    def action_select(self) -> None:
        if self._keys:
            self.post_message(self.RowSelected(self, self._keys[self.cursor_row]))

    def on_click(self, event: events.Click) -> None:
        """A click moves the cursor to the row; a click on the cursor row selects it."""
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return
        row = offset.y - 1 + round(self.scroll_y)
        if row >= len(self._keys):
            return
        event.stop()
        if row == self.cursor_row:
            self.action_select()
        else:
            self.cursor_row = row

    # -- drawing ---------------------------------------------------------------------------------------
    def render_lines(self, crop: Region) -> list[Strip]:
        self._look = (self.rich_style, self.get_component_rich_style("row-table--cursor"),
                      self.get_component_rich_style("row-table--header"))
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x = round(self.scroll_x)
        if y == 0:
            strip = self._header(width)
        else:
            row = y - 1 + round(self.scroll_y)
            if row >= len(self._keys):
                return Strip.blank(width, self._look[0])
            strip = self._row(row, width)
        return strip.crop(scroll_x, scroll_x + width)

    def _header(self, width: int) -> Strip:
        base, _, header = self._look
        look = (width, base, header, tuple(self.columns))
        if self._header_strip is None or self._header_strip[0] != look:
            labels = [Text(column.label, no_wrap=True, overflow="ellipsis", end="") for column in self.columns]
            self._header_strip = (look, self._strip(labels, base + header, Style(), width))
        return self._header_strip[1]

    def _row(self, row: int, width: int) -> Strip:
        key = self._keys[row]
        base, cursor_style, _ = self._look
        cursor = row == self.cursor_row
        look = (width, cursor, self._look)
        cached = self._strips.get(key)
        if cached is not None and cached[0] == look:
            return cached[1]
        cells = self._cells_of(key, self._items[key])
        if cursor:  # the cursor's colours win over the cells' own, as DataTable's do
            strip = self._strip(cells, base + cursor_style,
                                Style.from_color(cursor_style.color, cursor_style.bgcolor), width)
        else:
            strip = self._strip(cells, base, Style(), width)
        self._strips.set(key, (look, strip))
        return strip

    def _strip(self, cells: Sequence[Text], style: Style, post: Style, width: int) -> Strip:
        """The cells cut or padded to their columns, one space either side, then the line
        filled to ``width`` (or the columns' width, when wider: the table scrolls sideways)."""
        line = Text(end="", no_wrap=True)
        pad = " " * CELL_PADDING
        for column, cell in zip(self.columns, cells):
            fitted = cell.copy()
            fitted.truncate(column.width, overflow=cell.overflow or "crop")
            line.append(pad)
            line.append_text(fitted)
            line.append(" " * (column.width - fitted.cell_len) + pad)  # in the row's style, not the cell's
        segments = list(Segment.apply_style(line.render(self.app.console), style, post or None))
        total = max(width, self.virtual_size.width)
        return Strip(segments, line.cell_len).adjust_cell_length(total, style).simplify()
