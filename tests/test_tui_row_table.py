"""The virtual table under the agent view (roost/tui/row_table.py): it renders only the rows in view,
a changed row alone, and keeps the cursor, clicks and scrolling working at its bounds (no rows, a
row longer than the width, 10,000 rows, a resize while scrolled, the strip cache's size).

Counted, not timed: each test counts the rows the table asked to render."""

from __future__ import annotations

from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from roost.tui.row_table import CACHED_ROWS, Column, RowTable

COLUMNS = [Column("id", "id", 6), Column("text", "text", 30)]


class TableApp(App[None]):
    """Only the table, so every line of the screen below the header is a row."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = [(f"r{n:05d}", f"row {n}") for n in range(rows)]
        self.rendered: list[str] = []
        self.messages: list[tuple[str, str]] = []
        self.table: RowTable[str] = RowTable(self.cells, id="table")

    def cells(self, key: str, item: str) -> list[Text]:
        self.rendered.append(key)
        return [Text(key, no_wrap=True, overflow="ellipsis"), Text(item, no_wrap=True, overflow="ellipsis")]

    def compose(self) -> ComposeResult:
        yield self.table

    def on_mount(self) -> None:
        self.table.set_columns(COLUMNS)
        self.table.set_rows(self.rows)
        self.table.focus()

    def on_row_table_row_highlighted(self, message: RowTable.RowHighlighted) -> None:
        self.messages.append(("highlighted", message.key))

    def on_row_table_row_selected(self, message: RowTable.RowSelected) -> None:
        self.messages.append(("selected", message.key))


def change(table: RowTable[str], key: str, item: str) -> None:
    """Every row given again, as the agent view gives them, with one of them changed."""
    table.set_rows({**table.rows, key: item}.items())


def shown(table: RowTable[Any]) -> list[str]:
    """The text of every line the table shows now, the header first."""
    return [table.render_line(y).text.rstrip() for y in range(table.scrollable_content_region.height)]


async def test_ten_thousand_rows_render_only_the_rows_in_view() -> None:
    app = TableApp(10_000)
    async with app.run_test(size=(60, 24)) as pilot:
        await pilot.pause()
        table = app.table
        in_view = table.visible_ids()
        assert len(in_view) == 23 and in_view[0] == "r00000", in_view  # 24 lines less the header
        assert set(app.rendered) == set(in_view), "only the rows in view were rendered"
        assert shown(table)[1].split()[:3] == ["r00000", "row", "0"]

        app.rendered.clear()
        await pilot.press("pagedown")
        await pilot.pause()
        assert table.visible_ids()[-1] == table.selected_id() == "r00022", table.visible_ids()
        assert set(app.rendered) <= set(table.visible_ids()) and len(app.rendered) <= 23, app.rendered

        app.rendered.clear()
        await pilot.press("end")
        await pilot.pause()
        assert table.selected_id() == "r09999" and table.visible_ids()[-1] == "r09999"
        assert set(app.rendered) <= set(table.visible_ids()), "the end of 10,000 rows renders the last page only"
        assert shown(table)[-1].split()[0] == "r09999"


async def test_updating_one_row_renders_that_row_only() -> None:
    app = TableApp(10_000)
    async with app.run_test(size=(60, 24)) as pilot:
        await pilot.pause()
        table = app.table
        app.rendered.clear()
        change(table, "r00005", "said something new")
        await pilot.pause()
        assert app.rendered == ["r00005"], app.rendered
        assert "said something new" in shown(table)[6]

        app.rendered.clear()
        change(table, "r05000", "out of view")  # nothing to draw until it comes into view
        await pilot.pause()
        assert app.rendered == []

        app.rendered.clear()
        table.set_rows(list(table.rows.items()))  # the same rows again
        await pilot.pause()
        assert app.rendered == [], "rows equal to the ones held keep their lines"

        table.move_cursor(row=5000)
        await pilot.pause()
        assert table.selected_id() == "r05000" and "out of view" in "\n".join(shown(table))


class Said(str):
    """A row's item that counts how often the table compares it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Said.compared += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__


async def test_told_which_rows_changed_it_compares_those_alone() -> None:
    """The agent view names the rows an update changed: of 10,000, one is compared and drawn."""
    app = TableApp(10_000)
    async with app.run_test(size=(60, 24)) as pilot:
        await pilot.pause()
        table = app.table
        rows = {key: Said(item) for key, item in table.rows.items()}
        table.set_rows(rows.items())
        await pilot.pause()
        app.rendered.clear()
        Said.compared = 0
        rows["r00005"] = Said("said something new")
        table.set_rows(rows.items(), changed={"r00005", "gone"})  # a named row it does not hold is no error
        await pilot.pause()
        assert Said.compared == 1 and app.rendered == ["r00005"], (Said.compared, app.rendered)
        assert "said something new" in shown(table)[6]


async def test_no_rows() -> None:
    app = TableApp(0)
    async with app.run_test(size=(60, 10)) as pilot:
        await pilot.pause()
        table = app.table
        assert table.row_count == 0 and table.selected_id() is None and table.visible_ids() == []
        for key in ("down", "up", "pagedown", "end", "home", "enter"):
            await pilot.press(key)
        await pilot.click(RowTable, offset=(3, 3))
        await pilot.pause()
        assert app.messages == [] and app.rendered == []
        lines = shown(table)
        assert lines[0].split() == ["id", "text"] and not any(lines[1:]), lines


async def test_a_row_longer_than_the_width_is_cut_to_its_column() -> None:
    app = TableApp(3)
    app.rows[1] = ("r00001", "x" * 10_000)
    async with app.run_test(size=(60, 10)) as pilot:
        await pilot.pause()
        table = app.table
        line = table.render_line(2)
        assert line.cell_length == table.scrollable_content_region.width == 60
        assert line.text.split() == ["r00001", "x" * 29 + "…"], line.text
        table.set_columns([Column("id", "id", 6), Column("text", "text", 200)])  # wider than the screen
        await pilot.pause()
        assert table.render_line(2).cell_length == 60, "a line is the width in view; the rest scrolls sideways"
        assert table.virtual_size.width == 8 + 202


@pytest.mark.parametrize("heights", [(24, 10, 40), (24, 40, 6)])
async def test_a_resize_while_scrolled_keeps_rows_and_lines_in_step(heights: tuple[int, ...]) -> None:
    app = TableApp(1_000)
    async with app.run_test(size=(60, heights[0])) as pilot:
        await pilot.pause()
        table = app.table
        await pilot.press("end")
        await pilot.pause()
        for height in heights[1:]:
            await pilot.resize_terminal(60, height)
            await pilot.pause()
            ids = table.visible_ids()
            assert len(ids) == height - 1 and ids[-1] == "r00999", (height, ids[:2], ids[-2:])
            lines = shown(table)
            assert [line.split()[0] for line in lines[1:]] == ids, "each line shows the row it says is in view"
            app.rendered.clear()
            await pilot.press("up")
            await pilot.pause()
            assert table.selected_id() == "r00998" and set(app.rendered) <= {"r00998", "r00999"}
            await pilot.press("down")


async def test_a_click_moves_the_cursor_and_a_second_selects() -> None:
    app = TableApp(50)
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        app.messages.clear()
        await pilot.click(RowTable, offset=(2, 4))  # the header, then rows 0, 1, 2, 3
        await pilot.pause()
        assert app.table.selected_id() == "r00003" and app.messages == [("highlighted", "r00003")]
        await pilot.click(RowTable, offset=(20, 4))
        await pilot.pause()
        assert app.messages[-1] == ("selected", "r00003")
        await pilot.click(RowTable, offset=(2, 0))  # the header selects nothing
        await pilot.pause()
        assert app.messages[-1] == ("selected", "r00003") and app.table.selected_id() == "r00003"


async def test_the_strip_cache_holds_at_most_its_bound() -> None:
    app = TableApp(CACHED_ROWS + 200)
    async with app.run_test(size=(60, 40)) as pilot:
        await pilot.pause()
        table = app.table
        for row in range(0, CACHED_ROWS + 200, 30):  # every row drawn once, past the bound
            table.scroll_to(y=row, animate=False, force=True)
            await pilot.pause()
        assert len(table._strips) == CACHED_ROWS
        table.scroll_to(y=0, animate=False, force=True)
        await pilot.pause()
        assert shown(table)[1].split()[:3] == ["r00000", "row", "0"], "a row dropped from the cache draws again"
