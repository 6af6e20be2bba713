"""``A`` on the agent view: the archived jobs (newest first), from which one comes back with ``u``."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from roost.client import ClientError
from roost.config import Config
from roost.rules.row_text import age_seconds, format_age
from roost.tui.daemon_link import DaemonLink, safe_row
from roost.tui.looks import cell, state_text
from roost.tui.roost_screen import RoostScreen, plural

#: How many archived jobs the view reads (one page; ``roost ls --archived`` pages through all).
ARCHIVED_PAGE = 500


class ArchivedScreen(RoostScreen):
    """Archived top-level jobs, read once from the daemon (archived jobs are not pushed)."""

    CSS_PATH = "agent_view.tcss"
    BINDINGS = [
        Binding("u", "unarchive", "unarchive"),
        Binding("escape,A", "back", "back"),
        Binding("j", "move(1)", "down", show=False),
        Binding("k", "move(-1)", "up", show=False),
    ]

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float]) -> None:
        super().__init__(link, config, clock)
        self.topbar = Static(id="topbar")
        self.table: DataTable[Text] = DataTable(id="jobs", cursor_type="row")

    def compose(self) -> ComposeResult:
        yield self.topbar
        yield self.table
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        for key, label, width in (("state", "state", 12), ("id", "id", 6), ("title", "job", 40), ("age", "age", 4)):
            self.table.add_column(label, width=width, key=key)
        self.table.focus()
        self.load()

    @work(group="load", exclusive=True)
    async def load(self) -> None:
        try:
            page = await self.link.call("list", archived_only=True, roots=True, newest_first=True, limit=ARCHIVED_PAGE)
        except ClientError as exc:
            self.status.say(exc.message, error=True)
            return
        assert self.palette is not None
        self.table.clear()
        rows = [safe_row(data) for data in page["rows"]]
        for row in rows:
            self.table.add_row(state_text(row, self.palette), cell(row.id, self.palette.muted),
                               cell(row.job.title), cell(format_age(age_seconds(row, self.clock())), self.palette.muted),
                               key=row.id)
        more = f" (the newest {ARCHIVED_PAGE}: roost ls --archived lists all)" if page["total"] > len(rows) else ""
        self.topbar.update(Text(f"roost  ·  archived  ·  {plural(page['total'], 'job')}{more}", style="bold"))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "unarchive" and self.table.row_count == 0:
            return None
        return super().check_action(action, parameters)

    def action_move(self, step: int) -> None:
        self.table.move_cursor(row=self.table.cursor_row + step)

    def action_unarchive(self) -> None:
        if self.table.row_count == 0:
            return
        job_id = self.table.coordinate_to_cell_key(self.table.cursor_coordinate).row_key.value
        self._unarchive(job_id)

    @work(group="requests")
    async def _unarchive(self, job_id: str) -> None:
        try:
            row = await self.link.call("unarchive", job=job_id)
        except ClientError as exc:
            self.status.say(exc.message, error=True)
            return
        self.status.say(f"unarchived {row['title']}: it is back in the agent view")
        self.load()

    def action_back(self) -> None:
        self.dismiss()
