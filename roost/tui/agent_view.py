"""The home screen: one row per listed job, kept current by row key, and the keys that act on it.

Its length is its bindings, one action each; the table (job_table.py), dialogs and peek pane
are widgets of their own."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from rich.style import Style
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from roost.client import ClientError
from roost.config import Config
from roost.models import NEEDS_INPUT_STATES, Row
from roost.rules.attention import next_attention, unseen_mark
from roost.rules.row_text import activity_text, age_seconds, format_age, usage_text
from roost.rules.ticks import next_age_change
from roost.rules.views import AgentViewRow, agent_view_rows, filter_rows, header_counts
from roost.tui.daemon_link import DaemonLink, LinkUpdate, safe_row
from roost.tui.approval_keys import APPROVAL_KEYS
from roost.tui.approval_text import APPROVAL_MARK, row_approvals, row_line
from roost.tui.archived_view import ArchivedScreen
from roost.tui.command_line import COMMANDS, CommandLine, parse_command
from roost.tui.dialogs import ConfirmBox, ScriptBox
from roost.tui.diff_view import open_diff
from roost.tui.filter_box import FilterBox
from roost.tui.filter_search import search_every_record
from roost.tui.job_screen import JobScreen
from roost.tui.job_table import Column, JobTable, table_columns
from roost.tui.peek_pane import PEEK_ENTRIES, PeekPane
from roost.tui.looks import BOLD, STATE_CELL_WIDTH, cell, state_marks, state_text
from roost.tui.roost_screen import RoostScreen, plural, send_outcome, stopped_text
from roost.tui.search_screen import SearchScreen

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
        self._cells: dict[str, dict[str, tuple[str, object]]] = {}
        #: Rows the daemon found for the filter beyond the listing window (roost/tui/filter_search.py),
        #: and how many matched when that was more than it sent (else None).
        self.found: dict[str, Row] = {}
        self.found_of: int | None = None
        self._columns: list[Column] = []
        # Kept, not queried: the footer asks check_action even while the screen is taken down.
        self.topbar = Static(id="topbar")
        self.table = JobTable(id="jobs", cursor_type="row")
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
    def _layout(self, width: int) -> None:
        """(Re)make the columns for this width; only a resize, the first draw, or the first
        usage figures come here."""
        usage = any(usage_text(row) for row in self.link.rows.values())
        columns = table_columns(width, usage)
        if columns == self._columns:
            return
        self._columns = columns
        table = self.table
        selected = table.selected_id()
        table.clear(columns=True)
        for column in columns:
            table.add_column(column.label, width=column.width, key=column.key)
        self._cells.clear()
        self._sync(selected)

    def rows_changed(self, update: LinkUpdate) -> None:
        if update.rows:
            self._layout(self.size.width)
            self._sync(self.table.selected_id())
            row = self._selected()
            if (row is not None and self.peek.display and row.id in update.rows
                    and tuple(approval.id for approval in row_approvals(row)) != self.peek.approvals):
                self._read_peek(row.id)  # what it asks came or went: peek shows it now

    def tick(self) -> None:
        """Only the ages move with time: draw the age cells in view whose text changed, nothing
        else (rows scrolled into view are ticked then: ``_scrolled``)."""
        assert self.palette is not None
        now = self.clock()
        for job_id in self.table.visible_ids():
            row, cells = self.link.rows.get(job_id), self._cells.get(job_id)
            if row is None or cells is None:
                continue
            text = cell(format_age(age_seconds(row, now)), self.palette.muted)
            if text.plain != cells["age"][0]:
                self.table.update_cell(job_id, "age", text)
                cells["age"] = (text.plain, text.style)

    def next_change(self, now: float) -> float | None:
        return next_age_change((self.link.rows[key] for key in self.table.visible_ids() if key in self.link.rows), now)

    @on(JobTable.Scrolled)
    def _scrolled(self) -> None:
        if self.palette is not None:
            self.tick()
            self.arm_tick()

    def restyle(self) -> None:
        self._cells = {key: {} for key in self._cells}  # every cell of every row is drawn again
        self._sync(self.table.selected_id())

    def _sync(self, selected: str | None) -> None:
        """Make the table match the listed rows: cells that changed, rows that came or went."""
        if not self._columns or self.palette is None:
            return
        every = agent_view_rows(self.link.rows.values(), self.config.agent_view_subagents)
        searched = agent_view_rows({**self.found, **self.link.rows}.values(), self.config.agent_view_subagents) \
            if self.found else every
        kept = {row.id for row in filter_rows((item.row for item in searched), self.filter_text)}
        listed = [item for item in searched if item.row.id in kept]
        wanted = [item.row.id for item in listed]
        table = self.table
        with self.app.batch_update():
            for key in set(self._cells) - set(wanted):
                table.remove_row(key)
                del self._cells[key]
            current = [r.key.value for r in table.ordered_rows]
            if current != wanted[: len(current)]:
                table.clear()  # the order changed (a new job sorts first): lay the rows out again
                self._cells.clear()
            now = time.monotonic()
            for item in listed:
                self._put(item)
                self.shown.show(item.row.id, next(iter(row_approvals(item.row)), None), now)
            self.shown.keep(wanted)
            if self._select in self._cells:
                selected, self._select = self._select, None
            if selected in self._cells:
                table.move_cursor(row=table.get_row_index(selected), animate=False)
        self.empty.display = not listed
        self.empty.update("no job matches the filter: esc clears it" if self.filter_text and every
                          else "no jobs yet: press n to start one, or run  roost demo")
        self._draw_topbar(every)
        self.arm_tick()  # other rows in view (a filter, new rows): their ages say when to tick

    def _put(self, item: AgentViewRow) -> None:
        """Add the row, or update only the cells whose text or colour changed."""
        cells = self._row_cells(item)
        table = self.table
        old = self._cells.get(item.row.id)
        if old is None:
            table.add_row(*(cells[c.key] for c in self._columns), key=item.row.id)
        else:
            for key, text in cells.items():
                if old.get(key) != (text.plain, text.style):
                    table.update_cell(item.row.id, key, text)
        self._cells[item.row.id] = {key: (text.plain, text.style) for key, text in cells.items()}

    def _row_cells(self, item: AgentViewRow) -> dict[str, Text]:
        assert self.palette is not None
        palette, row = self.palette, item.row
        asks = row.state in NEEDS_INPUT_STATES
        widths = {c.key: c.width for c in self._columns}
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
            "age": cell(format_age(age_seconds(row, self.clock())), palette.muted),
            "activity": cell(" · ".join(activity), tone),
        }
        if "usage" in widths:
            cells["usage"] = cell(usage, palette.muted)
        return cells

    def _draw_topbar(self, listed: list[AgentViewRow]) -> None:
        """What needs you first (failed, asking, approvals), then the counts: a narrow terminal
        cuts the bar at its end, so "failed" is the last word it may lose."""
        assert self.palette is not None
        palette = self.palette
        counts = header_counts(item.row for item in listed)
        asking, approvals = counts["needs you"], sum(len(row_approvals(item.row)) for item in listed)
        parts: list[tuple[object, str, Style | str]] = [
            (counts["failed"], f"{counts['failed']} failed", palette.error + BOLD),
            (asking, f"{asking} need{'s' if asking == 1 else ''} you", palette.warning + BOLD),
            (approvals, f"{APPROVAL_MARK} {plural(approvals, 'approval')}", palette.warning + BOLD),
            (True, plural(counts["jobs"], "job"), ""),
            (True, f"{counts['working']} working", ""),
            (counts["queued"], f"{counts['queued']} queued", palette.muted),
            (self.link.more, f"{self.link.more:,} older not listed: roost ls --all", palette.muted),
            (self.filter_text, f"filter: {self.filter_text}", palette.primary),
        ]
        bar = Text("roost", style="bold")
        for shown, text, style in parts:
            if shown:
                bar.append("  ·  ")
                bar.append(text, style=style)
        if self.filter_text and self.found_of is not None:  # the filter's text is the bar's last part
            bar.append(f" (the newest {len(self.found):,} of {self.found_of:,} matches: roost ls --all)",
                       style=palette.muted)
        self.topbar.update(bar)

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

    @on(DataTable.RowSelected)
    def _clicked(self, event: DataTable.RowSelected) -> None:
        """A click on the row under the cursor (Enter is the ``open`` action)."""
        if event.row_key.value is not None:
            self.open_job(event.row_key.value)

    def open_job(self, job_id: str) -> None:
        self.app.push_screen(JobScreen(self.link, self.config, self.clock, job_id))

    def action_move(self, step: int) -> None:
        if step > 0:
            self.table.action_cursor_down()
        else:
            self.table.action_cursor_up()

    def action_edge(self, index: int) -> None:
        """``g``/Home: the first row; ``G``/End: the last."""
        if self.table.row_count:
            self.table.move_cursor(row=index % self.table.row_count, animate=False)

    def action_next_needing(self) -> None:
        """``w``: the next row that needs you, the most urgent kind first (roost/rules/attention.py)."""
        ids = [r.key.value for r in self.table.ordered_rows]
        found = next_attention([row for job_id in ids if (row := self._row(job_id))], self.table.selected_id())
        if found is None:
            self.status.say("no job needs you")
            return
        row, kind = found
        self.table.move_cursor(row=ids.index(row.id), animate=False)
        self.status.say(f"{kind.word}: {row.job.title}")

    # -- peek, filter, rename, archived ------------------------------------------------------------------
    def action_peek(self) -> None:
        """Space: the selected job's last entries in a pane, or the pane away again."""
        self.peek.display = not self.peek.display
        self._peek_selected()

    @on(DataTable.RowHighlighted)
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
