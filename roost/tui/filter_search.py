"""The agent view's filter reaches every record, not only the rows its subscription loaded: when
the listing window left older jobs out, the filter text goes to the daemon (``list`` with
``match``), and the rows it finds join the view while the filter holds."""

from __future__ import annotations

from typing import Protocol

from textual import work

from roost.client import ClientError
from roost.config import Config
from roost.models import Row
from roost.tui.daemon_link import DaemonLink, safe_row
from roost.tui.status_line import StatusLine


class Searching(Protocol):
    """What the search needs of the agent view: where to ask, what is typed, where the rows go."""

    config: Config
    link: DaemonLink
    status: StatusLine
    filter_text: str

    def show_found(self, rows: list[Row], total: int | None) -> None: ...

#: The most rows one search brings in (newest first); the top bar says how many more matched.
SEARCH_LIMIT = 500


@work(group="filter-search", exclusive=True)
async def search_every_record(screen: Searching, text: str) -> None:
    """Ask the daemon for every job the filter ``text`` matches, and show them while it holds."""
    inline = screen.config.agent_view_subagents == "inline"
    try:
        page = await screen.link.call("list", match=text, roots=not inline, newest_first=True, limit=SEARCH_LIMIT)
    except ClientError as exc:
        screen.status.say(exc.message, error=True)
        return
    if screen.filter_text != text:
        return  # typed on: a newer search follows
    screen.show_found([safe_row(data) for data in page["rows"]], page["total"] if page["next"] is not None else None)
