"""The home screen: one row per listed job, kept current by row key, and the keys that act on it.

Its length is its bindings, one action each; the table (job_table.py), dialogs and peek pane
are widgets of their own."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.widgets import Static

from roost.client import ClientError
from roost.config import Config
from roost.models import Row
from roost.rules.attention import next_attention
from roost.rules.row_text import usage_text
from roost.rules.ticks import next_age_change
from roost.rules.view_model import AgentListing
from roost.rules.views import AgentViewRow, agent_view_rows, filter_rows
from roost.tui.daemon_link import DaemonLink, LinkUpdate, safe_row
from roost.tui.approval_keys import APPROVAL_KEYS
from roost.tui.agent_row_cells import age_cell, row_cells, topbar_text
from roost.tui.approval_text import row_approvals
from roost.tui.archived_view import ArchivedScreen
from roost.tui.command_line import COMMANDS, CommandLine, parse_command
from roost.tui.dialogs import ConfirmBox, ScriptBox
from roost.tui.diff_view import open_diff
from roost.tui.filter_box import FilterBox
from roost.tui.filter_search import search_every_record
from roost.tui.job_screen import JobScreen
from roost.tui.job_table import JobTable, table_columns
from roost.tui.peek_pane import PEEK_ENTRIES, PeekPane
from roost.tui.roost_screen import RoostScreen, plural, send_outcome, stopped_text
from roost.tui.search_screen import SearchScreen
from roost.tui.usage_screen import UsageScreen

class AgentViewScreen(RoostScreen):
    """Every listed job, newest first; Enter opens one."""

    CSS_PATH = "agent_view.tcss"
    # In the order of the footer, which a narrow terminal cuts: the most used first (? lists all).
    BINDINGS = [
        Binding("n", "new", "new"),
        Binding("m", "message", "message"),
        Binding("slash", "filter", "filter"),
        Binding("escape", "clear_filter", "clear filter"),
        Binding("space", "peek", "peek", key_display="space"),
        Binding("K", "stop_tree", "stop tree", key_display="K K"),
        Binding("a", "archive", "archive"),
        Binding("colon", "command", "command"),
        Binding("q", "quit", "quit"),
        Binding("w", "next_needing", "next needing you"),
        Binding("p", "pin", "pin"),
        Binding("r", "rename", "rename"),
        Binding("A", "archived", "archived"),
        Binding("d", "diff", "diff"),
        Binding("S", "search", "search", show=False),
        Binding("U", "usage", "usage", show=False),
        Binding("F", "fork", "fork", show=False),
        Binding("j,down", "move(1)", "down", show=False),
        Binding("k,up", "move(-1)", "up", show=False),
        Binding("g,home", "edge(0)", "first", show=False),
        Binding("G,end", "edge(-1)", "last", show=False),
    ]

    #: What the filter line holds ("" lists every row).
    filter_text: reactive[str] = reactive("")

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float], select: str | None = None) -> None:
        super().__init__(link, config, clock)
        self._select = select
        #: The age each row in the table was last drawn with: a tick draws again only those that changed.
        self._ages: dict[str, str] = {}
        #: Whether some listed job has usage figures (the table gives them a column when wide).
        self._usage = False
        #: The listed rows and the top bar's counts, changed by the rows an update names.
        self.listing = AgentListing(config.agent_view_subagents)
        #: Rows the daemon found for the filter beyond the listing window (roost/tui/filter_search.py),
        #: and how many matched when that was more than it sent (else None).
        self.found: dict[str, Row] = {}
        self.found_of: int | None = None
        # Kept, not queried: the footer asks check_action even while the screen is taken down.
        self.topbar = Static(id="topbar")
        self.table = JobTable(self._cells, id="jobs")
        self.empty = Static("no jobs yet: press n to start one, or run  roost demo", id="empty")
        self.command_line = CommandLine(placeholder=" · ".join(COMMANDS), id="command", select_on_focus=False)
        self.filter_box = FilterBox(id="filter")
        self.peek = PeekPane(id="peek")

    def compose(self) -> ComposeResult:
        yield self.topbar
        yield self.table
        yield self.empty
        yield self.peek
        yield self.filter_box
        yield self.command_line
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.table.focus()
        self._layout(self.size.width)

    def on_resize(self, event: events.Resize) -> None:
        self._layout(event.size.width)
        self.arm_tick()  # more rows in view, or fewer

    # -- drawing ----------------------------------------------------------------------------------
    def _layout(self, width: int, changed: set[str] | None = None) -> None:
        """(Re)make the columns for this width; only a resize, the first draw, or the first
        usage figures come here. With ``changed`` (the rows an update changed, none of them gone)
        only those are read for usage: a job's usage figures only grow, so they stay once seen."""
        rows = self.link.rows
        if changed is not None and changed <= rows.keys():
            self._usage = self._usage or any(usage_text(rows[job_id]) for job_id in changed)
        else:
            self._usage = any(usage_text(row) for row in rows.values())
        columns = table_columns(width, self._usage)
        if columns != self.table.columns:
            self.table.set_columns(columns)
            self._sync(self.table.selected_id())

    def _cells(self, job_id: str, item: AgentViewRow) -> list[Text]:
        """A row's cells, asked for by the table when it draws the row."""
        assert self.palette is not None
        now = self.clock()
        self._ages[job_id] = age_cell(item, self.palette, now).plain
        return row_cells(item, self.table.columns, self.palette, now)

    def rows_changed(self, update: LinkUpdate) -> None:
        if update.rows or update.counts:
            self._layout(self.size.width, update.rows)
            self._sync(self.table.selected_id(), update.rows)
            row = self._selected()
            if (row is not None and self.peek.display and row.id in update.rows
                    and tuple(approval.id for approval in row_approvals(row)) != self.peek.approvals):
                self._read_peek(row.id)  # what it asks came or went: peek shows it now

    def tick(self) -> None:
        """Only the ages move with time: draw again the rows in view whose age text changed,
        nothing else (rows scrolled into view are drawn as they are then)."""
        assert self.palette is not None
        now = self.clock()
        table = self.table
        for job_id in table.visible_ids():
            item = table.rows[job_id]
            if self._ages.get(job_id) != age_cell(item, self.palette, now).plain:
                table.refresh_row(job_id)

    def next_change(self, now: float) -> float | None:
        return next_age_change((self.link.rows[key] for key in self.table.visible_ids() if key in self.link.rows), now)

    @on(JobTable.Scrolled)
    def _scrolled(self) -> None:
        if self.palette is not None:
            self.tick()  # a row drawn before, when it was last in view, may show an older age
            self.arm_tick()

    def restyle(self) -> None:
        self.table.clear_cache()  # every row in view is drawn again, in the new colours
        self._sync(self.table.selected_id())

    def _sync(self, selected: str | None, changed: set[str] | None = None) -> None:
        """Make the table hold the listed rows, in order; it draws again only the rows in view
        whose row changed. With ``changed`` (the rows an update named) the listing and the table
        look at those rows alone, unless one of them came, left or moved."""
        mode = self.config.agent_view_subagents
        if self.listing.mode != mode:
            self.listing, changed = AgentListing(mode), None
        if changed is None:
            self.listing.reset(self.link.rows)
        in_place = self.listing.update(self.link.rows, changed) if changed is not None else None
        if not self.table.columns or self.palette is None:
            return
        every = self.listing.items
        if self.found:  # the filter's search found rows beyond the window: listed among them
            searched, in_place = agent_view_rows({**self.found, **self.link.rows}.values(), mode), None
        else:
            searched = every
        listed = searched
        if self.filter_text:
            kept = {row.id for row in filter_rows((item.row for item in searched), self.filter_text)}
            listed = [item for item in searched if item.row.id in kept]
        table = self.table
        table.set_rows(((item.row.id, item) for item in listed), in_place)
        if in_place is None or self.filter_text:  # rows may have left
            self._ages = {job_id: age for job_id, age in self._ages.items() if job_id in table.rows}
        now = time.monotonic()
        for item in listed if in_place is None else (table.rows[key] for key in in_place if key in table.rows):
            # most rows ask nothing: their approvals are not read
            self.shown.show(item.row.id, next(iter(row_approvals(item.row)), None) if item.row.job.approvals else None,
                            now)
        if in_place is None or self.filter_text:
            self.shown.keep(list(table.rows))
        if self._select in table.rows:
            selected, self._select = self._select, None
        if selected in table.rows:
            table.move_cursor(row=table.get_row_index(selected))
        self.empty.display = not listed
        self.empty.update("no job matches the filter: esc clears it" if self.filter_text and every
                          else "no jobs yet: press n to start one, or run  roost demo")
        self.topbar.update(topbar_text(self.listing.counts.as_dict(), self.listing.approvals, self.link.counts,
                                       self.palette, self.link.more, self.filter_text, len(self.found), self.found_of,
                                       bool(self.link.sandbox_notice)))
        self.arm_tick()  # other rows in view (a filter, new rows): their ages say when to tick

    # -- keys --------------------------------------------------------------------------------------
    def _selected(self) -> Row | None:
        job_id = self.table.selected_id()
        return self._row(job_id) if job_id else None

    def _row(self, job_id: str) -> Row | None:
        """A listed row: the subscription's, or one the filter's search found."""
        return self.link.rows.get(job_id) or self.found.get(job_id)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("open", "message", "pin", "rename", "stop_tree", "archive", "peek", "diff", "fork") \
                and self._selected() is None:
            return None
        if action == "clear_filter":
            return bool(self.filter_text)
        return super().check_action(action, parameters)

    def action_open(self) -> None:
        row = self._selected()
        if row is not None:
            self.open_job(row.id)

    def answer_place(self) -> str | None:
        row = self._selected()
        return row.id if row is not None and row_approvals(row) and self.focused is self.table else None

    def single_press_keys(self) -> frozenset[str]:
        """With an approval on the selected row, its keys act only alone: typed in a burst
        (``yes``) they are text, which the agent view takes none of."""
        return APPROVAL_KEYS if self.answer_place() is not None else frozenset()

    @on(JobTable.RowSelected)
    def _clicked(self, event: JobTable.RowSelected) -> None:
        """A click on the row under the cursor (Enter is the ``open`` action)."""
        self.open_job(event.key)

    def open_job(self, job_id: str) -> None:
        self.app.push_screen(JobScreen(self.link, self.config, self.clock, job_id))

    def action_move(self, step: int) -> None:
        if step > 0:
            self.table.action_cursor_down()
        else:
            self.table.action_cursor_up()

    def action_edge(self, index: int) -> None:
        """``g``/Home: the first row; ``G``/End: the last."""
        self.table.action_edge(index)

    def action_next_needing(self) -> None:
        """``w``: the next row that needs you, the most urgent kind first (roost/rules/attention.py)."""
        ids = self.table.keys()
        found = next_attention([row for job_id in ids if (row := self._row(job_id))], self.table.selected_id())
        if found is None:
            self.status.say("no job needs you")
            return
        row, kind = found
        self.table.move_cursor(row=self.table.get_row_index(row.id))
        self.status.say(f"{kind.word}: {row.job.title}")

    # -- peek, filter, rename, archived ------------------------------------------------------------------
    def action_peek(self) -> None:
        """Space: the selected job's last entries in a pane, or the pane away again."""
        self.peek.display = not self.peek.display
        self._peek_selected()

    @on(JobTable.RowHighlighted)
    def _highlighted(self) -> None:
        self._peek_selected()

    def _peek_selected(self) -> None:
        row = self._selected()
        if self.peek.display and row is not None:
            self._read_peek(row.id)

    @work(group="peek", exclusive=True)
    async def _read_peek(self, job_id: str) -> None:
        try:
            page = await self.link.call("logs", job=job_id, limit=PEEK_ENTRIES)
        except ClientError as exc:
            self.status.say(exc.message, error=True)
            return
        row = self._row(job_id)
        if row is not None and self.palette is not None:
            self.peek.show_entries(row, page["entries"], self.palette)

    def action_filter(self) -> None:
        self.filter_box.add_class("-open")
        self.set_focus(self.filter_box)

    @on(FilterBox.Changed, "#filter")
    def _filter_changed(self, event: FilterBox.Changed) -> None:
        self.filter_text = event.value.strip()

    @on(FilterBox.Done)
    def _filter_done(self, event: FilterBox.Done) -> None:
        self.filter_box.set_class(not event.cleared and bool(self.filter_text), "-open")
        self.set_focus(self.table)

    def action_clear_filter(self) -> None:
        self.filter_box.value = ""
        self.filter_box.remove_class("-open")

    def show_found(self, rows: list[Row], total: int | None) -> None:
        """What the daemon found for the filter: listed (and filtered) with the loaded rows;
        ``total`` is how many matched when it sent fewer."""
        self.found, self.found_of = {row.id: row for row in rows}, total
        self._sync(self.table.selected_id())

    def watch_filter_text(self) -> None:
        self.found, self.found_of = {}, None
        if self.filter_text and self.link.more:
            search_every_record(self, self.filter_text)
        self._sync(self.table.selected_id())

    def action_rename(self) -> None:
        row = self._selected()
        if row is not None:
            self.rename(row)

    def action_diff(self) -> None:
        row = self._selected()
        if row is not None:
            open_diff(self, row)

    def action_search(self) -> None:
        """``S``: search every transcript; a result opens its job at the entry."""
        def open_at(job_id: str, seq: int) -> None:
            self.app.push_screen(JobScreen(self.link, self.config, self.clock, job_id, at=seq))

        self.app.push_screen(SearchScreen(self.link, self.config, self.clock, open_at))

    def action_usage(self) -> None:
        """``U``: what jobs spent, today, this week and by tree (roost usage)."""
        self.app.push_screen(UsageScreen(self.link, self.config, self.clock))

    def action_fork(self) -> None:
        """``F``: a new job that goes on from the selected job's conversation (roost fork)."""
        row = self._selected()
        if row is not None:
            self.request("fork", {"job": row.id}, lambda result: f"forked {row.id} as {result['id']}: "
                                                                 "it starts on your first message")

    def action_archived(self) -> None:
        self.app.push_screen(ArchivedScreen(self.link, self.config, self.clock))

    def action_new(self) -> None:
        def spawn(prompt: str | None) -> None:
            if prompt:
                self._spawn(prompt)

        self.app.push_screen(ScriptBox(f"New job on the {self.config.default_driver} agent: its prompt"), spawn)

    def _spawn(self, prompt: str) -> None:
        def started(result: dict[str, object]) -> str:
            self._select = str(result["id"])
            return f"started {result['title']} [{result['id']}]"

        self.request("spawn", {"prompt": prompt, "driver": self.config.default_driver, "cwd": os.getcwd()}, started)

    def action_message(self) -> None:
        row = self._selected()
        if row is not None:
            self.write_to(row)

    def action_pin(self) -> None:
        row = self._selected()
        if row is None:
            return
        op = "unpin" if row.job.pinned else "pin"
        self.request(op, {"job": row.id}, lambda _: f"{op}ned {row.job.title}")

    def action_stop_tree(self) -> None:
        row = self._selected()
        if row is not None:
            self.stop_twice(row.id, f"{row.job.title} and everything below it", lambda: self._stop(row.id))

    def _stop(self, job_id: str) -> None:
        self.request("stop", {"job": job_id, "tree": True}, lambda result: stopped_text(result["ids"]))

    def action_archive(self) -> None:
        row = self._selected()
        if row is None:
            return
        below = f" and its {plural(row.descendants, 'subagent')}" if row.descendants else ""

        def archive(yes: bool | None) -> None:
            if yes:
                self.request("archive", {"job": row.id},
                             lambda result: f"archived {plural(len(result['archived']), 'job')}")

        self.app.push_screen(ConfirmBox(f"Archive {row.job.title}{below}?"), archive)

    def action_command(self) -> None:
        self.command_line.add_class("-open")
        self.set_focus(self.command_line)  # now, so keys typed right after go to it

    @on(CommandLine.Closed)
    def _command_closed(self) -> None:
        self.command_line.remove_class("-open")
        self.set_focus(self.table)

    @on(CommandLine.Run)
    def _run(self, message: CommandLine.Run) -> None:
        self._command_closed()
        parsed = parse_command(message.text)
        if isinstance(parsed, str):
            if parsed:
                self.status.say(parsed, error=True)
            return
        word, args = parsed
        if word == "new":
            self._spawn(args[0])
        elif word == "open":
            self._open_id(args[0])
        elif word == "send":
            job_id, text = args
            self._look_up(job_id, lambda row: self.request("send", {"job": row.id, "text": text},
                                                           lambda result: send_outcome(row, result)))
        elif word == "stop":
            self._stop(args[0])
        elif word == "rename":
            job_id, title = args
            self._look_up(job_id, lambda row: self.request_rename(row, title))
        elif word == "archived":
            self.action_archived()
        elif word == "help":
            self.status.say(" · ".join(COMMANDS))
        elif word == "quit":
            self.app.exit()

    def _open_id(self, job_id: str) -> None:
        self._look_up(job_id, lambda row: self.open_job(row.id))

    @work(group="requests")
    async def _look_up(self, job_id: str, then: Callable[[Row], None]) -> None:
        """``then`` the job's row; one the agent view does not hold (a subagent, an old job) is
        asked of the daemon, which says when there is no such job."""
        row = self.link.rows.get(job_id)
        if row is None:
            try:
                row = safe_row(await self.link.call("show", job=job_id))
            except ClientError as exc:
                self.status.say(exc.message, error=True)
                return
        then(row)

    def action_quit(self) -> None:
        self.app.exit()
