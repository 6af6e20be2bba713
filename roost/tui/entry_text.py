"""How a timeline entry reads in the app (the transcript, the peek pane), how many lines it adds,
and what it weighs in the transcript's bounded window."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from rich.text import Text

from roost.rules.row_text import readable_text
from roost.text import safe_text
from roost.tui.looks import BOLD, Palette

#: What each line an entry shows weighs at least, so short lines are bounded too (a line drawn
#: costs far more than its text); a folded output's folded lines are not drawn, so not counted.
LINE_WEIGHT = 16
#: Output entries longer than this many lines are folded: their first and last FOLD_KEEP lines are
#: shown around a line that says how many are folded (``ctrl+o`` unfolds them, docs/keys.md).
FOLD_LINES = 200
FOLD_KEEP = 40
#: Timeline kinds that repeat what another entry already shows.
_SKIPPED = {"turn_end", "report", "pinned", "unpinned"}
#: States worth a line of their own (working follows every prompt, so it would only add noise).
_TONE_OF_STATE = {"waiting": "warning", "blocked": "warning", "failed": "error", "stopped": "muted",
                  "done": "success", "idle": "muted"}


def _text(entry: dict[str, Any]) -> str:
    data = entry.get("data") or {}
    if entry["kind"] == "reports":
        return "\n".join(str(report.get("text", "")) for report in data.get("reports") or [])
    return str(data.get("text", ""))


def weight(entry: dict[str, Any]) -> int:
    """What an entry costs the window: the real bytes of its text, and at least LINE_WEIGHT for
    each line it shows. A long output shows only its folded lines, so a 5,000-line output weighs
    its 24 KB, not 5,000 lines, and an entry the daemon keeps (64 KiB at most) fits the window."""
    text = _text(entry)
    lines = text.count("\n") + 1
    shown = 2 * FOLD_KEEP + 1 if entry["kind"] == "text" and lines > FOLD_LINES else lines
    return max(len(text.encode()), LINE_WEIGHT * shown)


def line_count(entry: dict[str, Any]) -> int:
    """How many lines an entry adds below the view, as written (what "↓ N new" counts): the same
    whether it is drawn or only counted."""
    kind, data = entry["kind"], entry.get("data") or {}
    if kind in _SKIPPED or (kind == "state" and data.get("state") not in _TONE_OF_STATE):
        return 0
    if kind in ("text", "prompt"):
        return _text(entry).removesuffix("\n").count("\n") + 1
    if kind == "reports":
        return len(data.get("reports") or [])
    return 1


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe_data(value: Any, clean: Callable[[str], str] = safe_text) -> Any:
    """Every string in ``value`` (JSON data: strings, numbers, lists, objects) passed through
    ``clean``, keys too: what jobs write is shown, and must never act on the terminal."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(key)): safe_data(item, clean) for key, item in value.items()}
    if isinstance(value, list):
        return [safe_data(item, clean) for item in value]
    return value


def _shown(text: str) -> str:
    """An entry's text as shown: safe for the terminal and free of report wire text."""
    return safe_text(readable_text(text))


def entry_text(entry: dict[str, Any], palette: Palette, stamped: bool = False,
               unfolded: bool = False) -> Text | None:
    """How one timeline entry reads in the transcript (after its time, ``stamped``; a long output
    whole only when ``unfolded``); None for entries it leaves out."""
    text = _entry_body(entry["kind"], safe_data(entry.get("data") or {}, _shown), palette)
    if text is not None and entry["kind"] == "text" and not unfolded:
        text = _folded(text, palette)
    if text is None or not stamped:
        return text
    stamp = Text(time.strftime("%H:%M:%S ", time.localtime(entry.get("ts") or 0)), style=palette.muted)
    return stamp + text


def _folded(text: Text, palette: Palette) -> Text:
    """A long output's first and last FOLD_KEEP lines, and between them how many are folded."""
    lines = text.split("\n", allow_blank=True)
    if len(lines) <= FOLD_LINES:
        return text
    hidden = len(lines) - 2 * FOLD_KEEP
    fold = Text(f"⋯ {hidden:,} lines folded · ctrl+o shows them", style=palette.muted)
    return Text("\n").join([*lines[:FOLD_KEEP], fold, *lines[-FOLD_KEEP:]])


def _entry_body(kind: str, data: dict[str, Any], palette: Palette) -> Text | None:
    if kind in _SKIPPED:
        return None
    if kind == "text":  # a command's output keeps its newlines: the one that ends it is the entry's end
        return Text(data.get("text", "").removesuffix("\n"), style=palette.text)
    if kind == "message":  # shown only while it waits: the prompt that delivers it replaces it
        first, *rest = data.get("text", "").splitlines() or [""]
        return Text(f"⋯ queued for its next turn: {first}" + (" …" if rest else ""), style=palette.muted)
    if kind == "prompt":
        first, *rest = data.get("text", "").splitlines() or [""]
        prompt = Text()
        prompt.append("› " + first, style=palette.primary + BOLD)
        for line in rest:
            prompt.append("\n  " + line, style=palette.primary)
        return prompt
    if kind == "tool":
        line = Text(f"⚙ {data.get('name')} ", style=palette.muted)
        line.append(_short(data.get("args") or {}), style=palette.muted)
        line.append(" → ")
        line.append(_short(data.get("result")), style=palette.error if data.get("error") else palette.muted)
        return line
    if kind == "reports":
        return _reports(data.get("reports") or [], palette)
    if kind == "state":
        state = data.get("state", "")
        if state not in _TONE_OF_STATE:
            return None
        reason = data.get("reason") or data.get("question") or ""
        return Text(f"· {state}" + (f": {reason}" if reason and state != "waiting" else ""),
                    style=palette.tone(_TONE_OF_STATE[state]))
    if kind == "error":
        return Text(f"✗ {data.get('message', '')}", style=palette.error)
    if kind == "reported":
        return Text(f"⇡ reported {data.get('state')} to {data.get('to')}", style=palette.muted)
    if kind == "worker":
        how = "re-adopted after a restart of the daemon" if data.get("adopted") else \
            "resumed" if data.get("resumed") else "started"
        return Text(f"· worker {how} (pid {data.get('pid')})",
                    style=palette.muted)
    if kind == "closed":
        return Text(f"· worker closed: {data.get('reason', '')}", style=palette.muted)
    if kind == "subagent":  # the agent's own subagent (Claude Code's Task): a line each, its view has the rest
        state = str(data.get("state") or "working")
        mark = {"done": "✓ done", "failed": "✗ failed"}.get(state, "…")
        tone = palette.error if state == "failed" else palette.muted
        return Text(f"⑂ {_short(data.get('title') or 'subagent', 60)} {mark}: {_short(data.get('text') or '', 100)}",
                    style=tone)
    if kind == "spawned":
        return Text(f"· started by {data.get('by', 'person')} on {data.get('driver')}", style=palette.muted)
    details = " ".join(f"{k}={_short(v, 40)}" for k, v in data.items())
    return Text(f"· {kind} {details}".rstrip(), style=palette.muted)


def _reports(reports: list[dict[str, Any]], palette: Palette) -> Text:
    """Children's reports, one line each: who, what state, what they said (the daemon sends
    them as data, docs/protocols.md)."""
    out = Text()
    for report in reports:
        if out:
            out.append("\n")
        state = report.get("state", "")
        question = report.get("kind") == "question"
        tone = palette.warning if question else palette.tone(_TONE_OF_STATE.get(state, "muted"))
        out.append(f"↩ {report.get('title', '')} [{report.get('child', '')}] {state}: ", style=tone + BOLD)
        out.append(report.get("text", ""), style=palette.text)
    return out
