"""Provider-native subagents (Claude Code's ``Task``) as read-only rows of the subagent panel.

They are not roost jobs: all roost keeps of one is the ``subagent`` entries on its parent's
timeline (docs/protocols.md). These pure functions turn those entries into rows the panel's own
rule (``roost.rules.views.panel_rows``) can place: children of the open job, with the same
lifetimes as any finished row. The clock is the ``now`` parameter; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from roost.models import Job, Row, State

__all__ = ["PROVIDER_DRIVER", "READ_ONLY_HINT", "ProviderRow", "ended_with_worker", "is_provider", "provider_rows",
           "subagent_entries", "subagent_says"]

#: The ``driver`` of a provider subagent's row: it has no driver of its own in roost.
PROVIDER_DRIVER = "provider"
#: What the footer says while a provider subagent's row is under the cursor.
READ_ONLY_HINT = "read-only: the agent's own subagent · x stops it, with its parent's other ones (and its turn)"

#: The entry's ``state`` word and the state its row shows.
_STATES = {"working": State.WORKING, "done": State.DONE, "failed": State.FAILED, "stopped": State.STOPPED}


@dataclass
class ProviderRow(Row):
    """A panel row of a provider subagent: read-only (no composer, no stop, no rename).

    ``entries`` are every ``subagent`` entry of it, oldest first: what its view shows."""

    entries: tuple[dict[str, Any], ...] = ()


def is_provider(row: Row) -> bool:
    """Whether ``row`` is a provider subagent's (read-only) rather than a roost job's."""
    return isinstance(row, ProviderRow)


def subagent_says(data: Any) -> tuple[str, bool] | None:
    """Which subagent a ``subagent`` entry's data is about, and whether it says that one works
    (any word but ``done``, ``failed`` or ``stopped``); None when it names none. The one reading of an entry
    both the panel's rows and the daemon's counts (roost/daemon/storage/index.py) make."""
    if not isinstance(data, Mapping) or not isinstance(data.get("id"), str) or not data["id"]:
        return None
    return data["id"], _STATES.get(str(data.get("state")), State.WORKING) is State.WORKING


def ended_with_worker(words: Iterable[Mapping[str, Any]], why: str) -> list[dict[str, Any]]:
    """The ``subagent`` entries that end each subagent whose last word in ``words`` (the job's
    entries, oldest first) says it works: they ran in the worker that is gone (``why``), so the
    timeline says they failed, and a later worker's counts do not bring them back."""
    last: dict[str, Mapping[str, Any]] = {}
    for data in words:
        if (said := subagent_says(data)) is not None:
            last[said[0]] = data
    return [{"id": ident, "title": data.get("title") or "subagent", "state": "failed",
             "text": f"it ended with its parent's worker ({why})"}
            for ident, data in last.items() if subagent_says(data) == (ident, True)]


def subagent_entries(entries: Iterable[Mapping[str, Any]], job_id: str) -> dict[str, list[dict[str, Any]]]:
    """The ``subagent`` entries of ``job_id`` by subagent id, each list in ``seq`` order, an entry
    seen twice (same ``seq``) kept once; malformed ones (no id) are left out."""
    by_id: dict[str, dict[int, dict[str, Any]]] = {}
    for entry in entries:
        if entry.get("kind") != "subagent" or entry.get("job") != job_id:
            continue
        said = subagent_says(entry.get("data"))
        if said is not None:
            by_id.setdefault(said[0], {})[entry.get("seq", 0)] = dict(entry)
    return {ident: [seen[seq] for seq in sorted(seen)] for ident, seen in by_id.items()}


def provider_rows(entries: Iterable[Mapping[str, Any]], parent: Row) -> list[ProviderRow]:
    """The provider subagents of ``parent`` as rows, children of it, oldest first.

    The last entry per subagent id wins: its ``state`` (``working``, ``done``, ``failed``, ``stopped``), its
    title and its text (the row's peek line); the row's ``state_since`` is that entry's time and
    ``created_at`` the first one's. A subagent still ``working`` while the parent has no worker
    (nothing runs it any more: the daemon ends such ones on its timeline, ``ended_with_worker``)
    shows ``stopped``, since the parent's ``state_since``, so it ages out like any stopped row. How many there are, and how
    many work, is what the parent's row says (``provider_subagents``, ``provider_running``).
    """
    running = parent.job.worker_up
    out: list[ProviderRow] = []
    for ident, mine in subagent_entries(entries, parent.id).items():
        last = mine[-1]
        data = last["data"]
        state = _STATES.get(str(data.get("state")), State.WORKING)
        since = float(last.get("ts", 0.0))
        text = str(data.get("text") or "")
        reason = (text or "it failed") if state is State.FAILED else ""
        if state is State.WORKING and not running:
            state, since = State.STOPPED, max(since, parent.job.state_since)
            reason = "its parent's worker ended"
        title = str(data.get("title") or "subagent")
        job = Job(id=ident, title=title, driver=PROVIDER_DRIVER, cwd=parent.job.cwd, state=state,
                  state_since=since, created_at=float(mine[0].get("ts", since)), updated_at=since,
                  parent=parent.id, last_text=text, depth=parent.job.depth + 1, reason=reason)
        out.append(ProviderRow(job, entries=tuple(mine)))
    return sorted(out, key=lambda row: (row.job.created_at, row.id))

