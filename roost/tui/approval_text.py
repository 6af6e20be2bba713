"""A pending approval as the app shows it: what will run, exactly, and the model's words beside it.

An approval (docs/protocols.md) is a job's row field: ``{"id", "tool", "what", "description"?,
"subagent"?, "asked_at"}``, where ``what`` is ``{"command", "cwd"}`` for a shell command,
``{"path", "diff"}`` for an edit or a write, ``{"url"}`` for a fetch and ``{"input"}`` otherwise.
Everything in it was written by an agent: the link makes every string of it safe for the
terminal when the row arrives (``daemon_link.safe_row``), so no view can draw it raw. The row shows one line
(``row_line``); peek and the job screen show it whole (``approval_text``), within bounds of their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text

from roost.models import Row
from roost.rules.approvals import hidden
from roost.tui.looks import BOLD, Palette

#: The mark of a pending approval on a row (the agent view, the panel) and in peek.
APPROVAL_MARK = "⚑"
#: How many lines of an edit's diff peek shows (the job screen shows the whole of it).
PEEK_DIFF_LINES = 6
#: What the job screen shows of one ``what`` at most: the daemon bounds it to a frame, the screen
#: to what a person reads in a block above the composer.
BLOCK_CHARS = 16_000
BLOCK_LINES = 400


@dataclass(frozen=True)
class Approval:
    """One pending approval of job ``job``: its daemon-wide id, the tool, and exactly what will run."""

    id: str
    job: str
    tool: str
    what: Mapping[str, Any]
    description: str = ""
    subagent: str = ""
    asked_at: float = 0.0

    @classmethod
    def from_wire(cls, job: str, data: Mapping[str, Any]) -> "Approval":
        """An entry of a row's ``approvals`` (made safe to draw by the link, ``safe_row``)."""
        what = data.get("what")
        return cls(id=str(data["id"]), job=job, tool=str(data.get("tool") or "tool"),
                   what=what if isinstance(what, Mapping) else {"input": what},
                   description=str(data.get("description") or ""), subagent=str(data.get("subagent") or ""),
                   asked_at=float(data.get("asked_at") or 0.0))


def row_approvals(row: Row) -> tuple[Approval, ...]:
    """A row's pending approvals, oldest first (as the daemon keeps them); entries without an id
    are not answerable, so left out."""
    return tuple(Approval.from_wire(row.id, entry) for entry in row.job.approvals
                 if isinstance(entry, Mapping) and entry.get("id"))


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def summary(approval: Approval) -> str:
    """``shell: echo hi > f``: the tool and what it would do, on one line (uncut)."""
    what = approval.what
    for key in ("command", "path", "url"):
        if isinstance(what.get(key), str):
            return f"{approval.tool}: {_one_line(what[key])}"
    return f"{approval.tool}: {_one_line(_json(what.get('input', dict(what))))}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def row_line(approvals: Iterable[Approval], width: int) -> str:
    """A row's activity while it waits on approvals: ``⚑ shell: echo hi > f (+1)``, the oldest
    one's tool and command cut to ``width``; the count of the others always stays."""
    pending = list(approvals)
    if not pending:
        return ""
    more = f" (+{len(pending) - 1})" if len(pending) > 1 else ""
    head = f"{APPROVAL_MARK} "
    return head + _cut(summary(pending[0]), max(width - len(head) - len(more), 1)) + more


def approval_text(approval: Approval, palette: Palette, diff_lines: int | None = None,
                  subagents: Mapping[str, str] | None = None) -> Text:
    """What will run, exactly, then the model's own words (marked as its words): the command and
    its cwd, the path and the diff (its first ``diff_lines`` lines, or all of it), the URL, or the
    tool's input, bounded by BLOCK_CHARS and BLOCK_LINES (saying how much was left out), so the
    words below it always show. An agent's own subagent that asks is named by its title in
    ``subagents`` (by id), where the caller knows it."""
    what = approval.what
    out = Text(end="")
    ask = palette.warning + BOLD
    command, path, url = what.get("command"), what.get("path"), what.get("url")
    if isinstance(command, str):
        out.append("it asks to run: ", style=ask)
        first, *rest = command.split("\n")
        out.append(first, style=palette.text + BOLD)
        for line in rest:  # a command of several lines: each one marked, so none reads as the cwd
            out.append("\n┆ ", style=palette.muted)
            out.append(line, style=palette.text + BOLD)
        if isinstance(what.get("cwd"), str):
            out.append("\nin " if rest else " in ", style=palette.muted)
            out.append(what["cwd"], style=palette.text)
    elif isinstance(path, str):
        out.append("it asks to edit: ", style=ask)
        out.append(path, style=palette.text + BOLD)
        diff = what.get("diff")
        if isinstance(diff, str) and diff:
            lines = diff.splitlines()
            shown = lines if diff_lines is None else lines[:diff_lines]
            tones = {"+": palette.success, "-": palette.error}
            for line in shown:
                out.append("\n  " + line, style=tones.get(line[:1], palette.muted))
            if len(shown) < len(lines):
                out.append(f"\n  … {len(lines) - len(shown)} more lines of the diff", style=palette.muted)
    elif isinstance(url, str):
        out.append("it asks to fetch: ", style=ask)
        out.append(url, style=palette.text + BOLD)
    else:
        out.append(f"it asks to use {approval.tool}: ", style=ask)
        out.append(_json(what.get("input", dict(what))), style=palette.text)
    out = _bounded(out, palette)
    if hidden(what):
        out.append(f"\n(too long to show whole: {hidden(what)}; no rule allows it unread: "
                   f"`roost approvals --full {approval.id}` shows all)", style=palette.warning)
    if approval.subagent:
        title = (subagents or {}).get(approval.subagent)
        who = f"{title} [{approval.subagent}]" if title else approval.subagent
        out.append(f"\nasked by the agent's own subagent {who}", style=palette.muted)
    if approval.description:
        out.append("\nthe model says: ", style=palette.muted)
        out.append(f"“{approval.description}”", style=palette.muted + Style(italic=True))
    return out


def _bounded(text: Text, palette: Palette) -> Text:
    plain = text.plain
    lines = plain.count("\n") + 1
    if len(plain) <= BLOCK_CHARS and lines <= BLOCK_LINES:
        return text
    cut = min(BLOCK_CHARS, sum(len(line) + 1 for line in plain.split("\n")[:BLOCK_LINES]))
    kept = text[:cut]
    left = len(plain) - cut
    kept.append(f"\n… {left:,} more characters not shown here", style=palette.muted)
    return kept
