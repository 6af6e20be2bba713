"""The agent view's filter reaches every record, not only the rows its subscription loaded: when
the listing window left older jobs out, the filter text goes to the daemon (``list`` with
``match``), and the rows it finds join the view while the filter holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work

from roost.client import ClientError
from roost.tui.daemon_link import safe_row

if TYPE_CHECKING:
    from roost.tui.agent_view import AgentViewScreen

#: The most rows one search brings in (newest first); the top bar says how many more matched.
SEARCH_LIMIT = 500


@work(group="filter-search", exclusive=True)
async def search_every_record(screen: AgentViewScreen, text: str) -> None:
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
