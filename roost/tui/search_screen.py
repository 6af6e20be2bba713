"""``S`` on the agent view: search every job's transcript through the daemon (roost/daemon/storage/search.py).

Type words and Enter: the results come newest first, a page at a time (the next page is read when
the cursor reaches the last row), each with its job, how long ago, and the matching text with the
match marked from the daemon's spans. Enter on a result opens its job at that entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input, Static

from roost.client import ClientError
from roost.config import Config
from roost.rules.search_results import one_line, when
from roost.text import safe_text
from roost.tui.daemon_link import DaemonLink
from roost.tui.looks import cell
from roost.tui.roost_screen import RoostScreen, plural

#: Results a page asks the daemon for.
SEARCH_PAGE = 50
#: The most results the screen holds (then it says to narrow the words).
SEARCH_HELD = 1000


class SearchScreen(RoostScreen):
    """A query line above the results; the results' table has the focus once a search ran."""

    CSS_PATH = "agent_view.tcss"
    BINDINGS = [
        Binding("enter", "open_result", "open at entry"),
        Binding("slash", "query", "new search"),
        Binding("escape", "back", "back"),
        Binding("j", "move(1)", "down", show=False),
        Binding("k", "move(-1)", "up", show=False),
    ]

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float],
                 open_at: Callable[[str, int], None]) -> None:
        super().__init__(link, config, clock)
        self.open_at = open_at
        self.topbar = Static(Text("roost  ·  search every transcript", style="bold"), id="topbar")
        self.query_box = Input(placeholder="words to find (a word ending in * is a prefix); Enter searches",
                               id="search-query")
        self.table: DataTable[Text] = DataTable(id="jobs", cursor_type="row")
        #: The results held, in table order, and the ``before`` of the page after them (None: no more).
        self.results: list[dict[str, Any]] = []
        self.next_before: int | None = None
        self.words = ""

    def compose(self) -> ComposeResult:
        yield self.topbar
        yield self.query_box
        yield self.table
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        for key, label, width in (("id", "job", 6), ("title", "title", 14), ("age", "when", 4), ("text", "match", 200)):
            self.table.add_column(label, width=width, key=key)
        self.query_box.focus()

    @on(Input.Submitted, "#search-query")
    def _submitted(self, event: Input.Submitted) -> None:
        words = event.value.strip()
        if words:
            self.words = words
            self.results, self.next_before = [], None
            self.table.clear()
            self.load(words, None)

    @work(group="load", exclusive=True)
    async def load(self, words: str, before: int | None) -> None:
        """A page of results after what is held (the first with ``before`` None)."""
        try:
            page = await self.link.call("search", text=words, limit=SEARCH_PAGE, before=before)
        except ClientError as exc:
            self.status.say(exc.message, error=True)
            return
        if words != self.words:
            return  # a newer search was asked for meanwhile
        assert self.palette is not None
        now = self.clock()
        for result in page["results"]:
            self.results.append(result)
            text, spans = one_line(result)
            snippet = Text(safe_text(text), no_wrap=True, overflow="ellipsis", end="")
            for start, end in spans:
                snippet.stylize("reverse bold", start, end)
            self.table.add_row(cell(str(result["job"]), self.palette.muted), cell(safe_text(str(result.get("title", "")))),
                               cell(when(result, now), self.palette.muted), snippet, key=str(result["seq"]))
        self.next_before = page["next"] if len(self.results) < SEARCH_HELD else None
        more = " and more below" if self.next_before is not None else ""
        indexing = "  ·  old entries are still being indexed" if page.get("indexing") else ""
        self.topbar.update(Text(f"roost  ·  search {words!r}  ·  {plural(len(self.results), 'result')}{more}{indexing}",
                                style="bold"))
        if self.results:
            self.table.focus()
        else:
            self.status.say(f"nothing matches {words!r}")

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.cursor_row == len(self.results) - 1 and self.next_before is not None:
            before, self.next_before = self.next_before, None
            self.load(self.words, before)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("open_result", "move") and (not self.results or self.query_box.has_focus):
            return None
        return super().check_action(action, parameters)

    def action_move(self, step: int) -> None:
        self.table.move_cursor(row=self.table.cursor_row + step)

    def action_open_result(self) -> None:
        result = self.results[self.table.cursor_row]
        self.open_at(str(result["job"]), int(result["seq"]))

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        """Enter on the table (the table takes it before the screen's binding)."""
        self.action_open_result()

    def action_query(self) -> None:
        self.query_box.focus()

    def action_back(self) -> None:
        self.dismiss()
