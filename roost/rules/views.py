"""What the app's views show: pure functions of the job rows, the config values and the clock.

Nothing here does I/O or imports Textual; the clock is always the ``now`` parameter (epoch
seconds), so every rule can be tested without a terminal and without waiting.

One module for where rows go (the agent view, the panel, the footer hint, notifications, the
filter), since those share the tree helpers and no view may hold a rule of its own; what one row
says as text is roost/rules/row_text.py, and the agent view's rows and top-bar counts kept
between updates roost/rules/view_model.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from roost.models import (ACTIVE_STATES, FINISHED_STATES, NEEDS_INPUT_STATES, STOPPABLE_STATES, Row,
                          State)
from roost.rules.row_tree import RowTree

__all__ = [
    "AGENT_VIEW_MODES",
    "PANEL_MODES",
    "SUBAGENT_HINT",
    "AgentViewRow",
    "PanelRow",
    "agent_view_rows",
    "check_mode",
    "filter_matches",
    "filter_rows",
    "newly_notable",
    "panel_rows",
    "parse_filter",
    "subagent_counts",
    "subagent_hint_visible",
    "summary_text",
    "tree_running_ids",
]

#: Values of ``agentViewSubagents``: children left out of the agent view, or listed inline.
AGENT_VIEW_MODES = ("hide", "inline")
#: Panel modes: the plain panel, ``/subagents`` and ``/subagents all``.
PANEL_MODES = ("normal", "recent", "all")
#: The footer hint shown for a while after a subagent finished (its panel row left at once).
SUBAGENT_HINT = "/subagents to see subagents"

#: States whose rows count as "running work": sorted first in the panel, stopped by ``K K``.
_RUNNING_STATES = STOPPABLE_STATES  # starting, working, waiting, blocked


@dataclass(frozen=True)
class AgentViewRow:
    """One line of the agent view: the row, its tree prefix and depth, and the subagent summary."""

    row: Row
    prefix: str
    depth: int
    summary: str


@dataclass(frozen=True)
class PanelRow:
    """One line of the subagent panel.

    ``depth`` is 1 for the open job's direct children; ``plus`` counts the panel rows shown
    below this one (its whole shown subtree); ``label`` is the text a plain renderer prints.
    """

    row: Row
    depth: int
    prefix: str
    plus: int
    label: str


# --------------------------------------------------------------------------- helpers


def check_mode(mode: str, modes: tuple[str, ...], view: str) -> None:
    """Raise a clear error for a mode ``view`` does not have."""
    if mode not in modes:
        raise ValueError(f"unknown {view} mode {mode!r} (expected one of {', '.join(modes)})")


def _live(rows: Iterable[Row]) -> dict[str, Row]:
    """Rows by id, archived ones dropped: no view ever shows an archived job."""
    return {r.id: r for r in rows if r.job.archived_at is None}


def _children_index(by_id: Mapping[str, Row]) -> dict[str, list[Row]]:
    """Child rows by parent id (only rows that have a parent)."""
    index: dict[str, list[Row]] = {}
    for row in by_id.values():
        if row.parent is not None:
            index.setdefault(row.parent, []).append(row)
    return index


def _chronological(row: Row) -> tuple[float, str]:
    return (row.job.created_at, row.id)


def _newest_first(row: Row) -> tuple[float, str]:
    # Negated created_at sorts newest first; the id stays ascending as a stable tie-break.
    return (-row.job.created_at, row.id)


def _tree(rows: Iterable[Row] | RowTree) -> RowTree:
    """The rows as a tree: the one a screen keeps (roost/rules/row_tree.py), or one built now."""
    return rows if isinstance(rows, RowTree) else RowTree(rows)


def _descendants(tree: RowTree, root: str) -> list[Row]:
    """Every non-archived row below ``root``, depth-first, siblings oldest first.

    The walk follows non-archived rows only (archiving cascades, so an archived row's subtree
    is archived too) and never visits a row twice, so a corrupt parent cycle cannot loop.
    """
    out: list[Row] = []
    seen = {root}

    def walk(parent: str) -> None:
        for child in sorted(tree.children(parent), key=_chronological):
            if child.id in seen:
                continue
            seen.add(child.id)
            out.append(child)
            walk(child.id)

    walk(root)
    return out


# --------------------------------------------------------------------------- agent view


def subagent_counts(row: Row) -> tuple[int, int]:
    """How many subagents a job has, and how many of them run: the roost jobs below it and the
    agent's own (provider-native) subagents, as its row says. The one count of the home view's
    ``N subagents (k running)`` and the job screen's, so they agree with each other and with the
    panel's read-only rows: the agent's own run while its worker is up, between turns too (the
    daemon's rows already say 0 without a worker; a record read here says the same)."""
    job = row.job
    own_running = job.provider_running if job.worker_up else 0
    return row.descendants + job.provider_subagents, row.running_descendants + own_running


def summary_text(row: Row) -> str:
    """``N subagents (k running)``: a parent's row tells about the children it no longer lists."""
    n, running = subagent_counts(row)
    if n <= 0:
        return ""
    noun = "subagent" if n == 1 else "subagents"
    return f"{n} {noun} ({running} running)"


def _agent_view_prefix(depth: int) -> str:
    return "" if depth <= 0 else "  " * (depth - 1) + "↳ "


def listed_in_agent_view(is_root: bool, parent_open: bool, state: State, inline: bool = False) -> bool:
    """Whether the agent view lists a (not archived) job: the one definition the app, the daemon's
    snapshot (``JobIndex.in_agent_view``) and its pushes (the publisher) share. Every root; with
    ``inline`` every job; else a child only while nothing holds its parent open and it still works
    or waits (an orphan that finished is left out)."""
    return is_root or inline or (not parent_open and state in ACTIVE_STATES)


def agent_view_rows(rows: Iterable[Row], mode: str = "hide") -> list[AgentViewRow]:
    """The home screen's rows (``agentViewSubagents`` is ``mode``).

    "hide": only top-level jobs, plus orphans that still work or wait (a child whose parent is
    not open, or whose parent row is absent or archived), so live work is never unseen; an
    orphan that finished is left out. "inline": children are rows again, depth-first under
    their parent with a ``↳`` prefix; a child whose parent row is absent becomes a root
    (whatever its state: inline lists every job). Roots are newest first; children in inline
    mode are oldest first under their parent, the order they were spawned. Archived rows are
    never listed.
    """
    check_mode(mode, AGENT_VIEW_MODES, "agent view")
    by_id = _live(rows)

    def parent_missing(row: Row) -> bool:
        return row.parent is not None and row.parent not in by_id

    if mode == "hide":
        listed = [
            row
            for row in by_id.values()
            if listed_in_agent_view(row.parent is None, row.parent_open and not parent_missing(row), row.state)
        ]
        return [AgentViewRow(row, "", 0, summary_text(row)) for row in sorted(listed, key=_newest_first)]

    # inline
    roots = sorted((r for r in by_id.values() if r.parent is None or parent_missing(r)), key=_newest_first)
    children = _children_index(by_id)
    out: list[AgentViewRow] = []
    seen: set[str] = set()

    def emit(row: Row, depth: int) -> None:
        if row.id in seen:
            return
        seen.add(row.id)
        out.append(AgentViewRow(row, _agent_view_prefix(depth), depth, summary_text(row)))
        for child in sorted(children.get(row.id, ()), key=_chronological):
            emit(child, depth + 1)

    for root in roots:
        emit(root, 0)
    return out


# --------------------------------------------------------------------------- subagent panel


def _within(row: Row, now: float, lifetime: float) -> bool:
    return now - row.job.state_since < lifetime


def _shown_normal(row: Row, now: float, lifetime: float) -> bool:
    state = row.state
    if state in _RUNNING_STATES:
        return True
    if state is State.IDLE:
        return row.job.worker_up
    if state in (State.FAILED, State.STOPPED):
        return _within(row, now, lifetime)
    return False  # done: leaves at once (the footer hint points to /subagents)


def _finished_recently(row: Row, now: float, lifetime: float) -> bool:
    finished = row.state in FINISHED_STATES or (row.state is State.IDLE and not row.job.worker_up)
    return finished and _within(row, now, lifetime)


def _panel_prefix(depth: int) -> str:
    return "" if depth <= 1 else "  " * (depth - 2) + "└ "


def _panel_group(row: Row) -> tuple[int, float, str]:
    """Running and waiting rows first among siblings, then the rest; each group oldest first."""
    return (0 if row.state in _RUNNING_STATES else 1, row.job.created_at, row.id)


def panel_rows(
    rows: Iterable[Row] | RowTree,
    open_job: str,
    now: float,
    mode: str = "normal",
    hidden: frozenset[str] = frozenset(),
    lifetime: float = 30.0,
) -> list[PanelRow]:
    """The subagent panel of ``open_job``: a tree of its descendants (not the job itself).

    "normal": running, waiting and blocked rows; idle rows while their worker is up; failed
    and stopped rows for ``lifetime`` seconds from ``state_since``; done rows leave at once;
    ids in ``hidden`` (``x``) leave at once. "recent" (``/subagents``): also the rows that
    finished within ``lifetime``, sorted below running work. "all" (``/subagents all``): every
    non-archived descendant, ignoring ``hidden`` and lifetimes. In every mode a row that would
    not be shown stays while something below it is shown, so there is a path to it.
    """
    check_mode(mode, PANEL_MODES, "panel")

    def shown(row: Row) -> bool:
        if mode == "all":
            return True
        if row.id in hidden:
            return False
        if _shown_normal(row, now, lifetime):
            return True
        return mode == "recent" and _finished_recently(row, now, lifetime)

    tree = _tree(rows)
    seen = {open_job}

    def build(parent: str, depth: int) -> list[PanelRow]:
        """The panel lines of ``parent``'s subtree (without ``parent`` itself)."""
        lines: list[PanelRow] = []
        for child in sorted(tree.children(parent), key=_panel_group):
            if child.id in seen:
                continue
            seen.add(child.id)
            below = build(child.id, depth + 1)
            if not below and not shown(child):
                continue
            prefix = _panel_prefix(depth)
            plus = len(below)
            label = prefix + child.job.title + (f" (+{plus})" if plus else "")
            lines.append(PanelRow(child, depth, prefix, plus, label))
            lines.extend(below)
        return lines

    return build(open_job, 1)


def subagent_hint_visible(rows: Iterable[Row] | RowTree, open_job: str, now: float, lifetime: float = 30.0) -> bool:
    """Whether the footer shows ``SUBAGENT_HINT``: a descendant finished ``done`` in the last
    ``lifetime`` seconds (its panel row left at once, so the hint says where to find it).
    Failed and stopped rows stay in the panel and need no hint."""
    return any(
        row.state is State.DONE and 0 <= now - row.job.state_since < lifetime
        for row in _descendants(_tree(rows), open_job)
    )


def tree_running_ids(rows: Iterable[Row] | RowTree, root: str) -> list[str]:
    """Ids of every non-archived descendant of ``root`` that is starting, working, waiting or
    blocked: what ``K K`` and ``/subagents stop`` stop, so the app can say how many.
    Depth-first, siblings oldest first; ``root`` itself is never included."""
    return [row.id for row in _descendants(_tree(rows), root) if row.state in _RUNNING_STATES]


# --------------------------------------------------------------------------- header, notifications, filter

#: What ``notify`` can name, and the states each stands for.
NOTABLE_STATES: dict[str, frozenset[State]] = {
    "needs_input": NEEDS_INPUT_STATES,
    "failed": frozenset({State.FAILED}),
    "done": frozenset({State.DONE}),
}


def newly_notable(before: Mapping[str, State] | None, rows: Iterable[Row],
                  wanted: Iterable[str]) -> list[tuple[str, Row]]:
    """Rows that entered a state ``notify`` asks about since ``before`` (each row's state last
    time, by id), as (what, row); a row that was already in it says nothing again. The first
    look (``before`` None) is only a baseline: jobs that needed you before the app opened do
    not ring."""
    if before is None:
        return []
    out: list[tuple[str, Row]] = []
    for row in rows:
        for what in wanted:
            states = NOTABLE_STATES[what]
            if row.state in states and before.get(row.id) not in states:
                out.append((what, row))
    return out


#: ``s:NAME`` filters by state; names beyond the states themselves stand for a group.
_STATE_FILTERS: dict[str, frozenset[State]] = {
    **{state.value: frozenset({state}) for state in State},
    "running": _RUNNING_STATES,
    "needs": NEEDS_INPUT_STATES,
}


def parse_filter(query: str) -> tuple[frozenset[State] | None, list[str]]:
    """A filter's states (None: any) and its other words, lowercased: ``s:failed`` (any state
    name, or ``running`` / ``needs``) names states, ORed among themselves; an unknown name matches
    nothing. The app filters its rows with it and the daemon's ``list`` (``match``) every record."""
    words = query.lower().split()
    states = [word[2:] for word in words if word.startswith("s:")]
    text = [word for word in words if not word.startswith("s:")]
    if not states:
        return None, text
    return frozenset().union(*(_STATE_FILTERS.get(s, frozenset()) for s in states)), text


def filter_matches(state: State, title: str, job_id: str, parsed: tuple[frozenset[State] | None, list[str]]) -> bool:
    """Whether a job passes a parsed filter: in one of its states, and every word in its title or id."""
    states, words = parsed
    if states is not None and state not in states:
        return False
    haystack = f"{title} {job_id}".lower()
    return all(word in haystack for word in words)


def filter_rows(rows: Iterable[Row], query: str) -> list[Row]:
    """The rows a filter keeps, in their order: every word must match (``parse_filter``); words
    that are not ``s:`` match the title or the id, case-insensitively."""
    parsed = parse_filter(query)
    return [row for row in rows if filter_matches(row.state, row.job.title, row.id, parsed)]
