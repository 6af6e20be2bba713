"""A job's transcript: its timeline read once from the daemon, then streamed as entries arrive."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.text import Text
from textual.widgets import RichLog

from roost.tui.looks import BOLD, Palette

#: One child's report inside a ``reports`` entry (the daemon's format, docs/protocols.md).
_REPORT = re.compile(r'<roost-report child="([^"]*)" title="([^"]*)" state="([^"]*)" kind="([^"]*)">\n(.*?)\n'
                     r'</roost-report>', re.S)
#: Timeline kinds that repeat what another entry already shows.
_SKIPPED = {"turn_end", "report", "message", "pinned", "unpinned"}
#: States worth a line of their own (working follows every prompt, so it would only add noise).
_TONE_OF_STATE = {"waiting": "warning", "blocked": "warning", "failed": "error", "stopped": "muted",
                  "done": "success", "idle": "muted"}


def _unescape(text: str) -> str:
    return text.replace("&quot;", '"').replace("&lt;", "<").replace("&amp;", "&")


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def entry_text(entry: dict[str, Any], palette: Palette) -> Text | None:
    """How one timeline entry reads in the transcript; None for entries it leaves out."""
    kind, data = entry["kind"], entry.get("data") or {}
    if kind in _SKIPPED:
        return None
    if kind == "text":
        return Text(data.get("text", ""), style=palette.text)
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
        return _reports(data.get("text", ""), palette)
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
        return Text(f"· worker {'resumed' if data.get('resumed') else 'started'} (pid {data.get('pid')})",
                    style=palette.muted)
    if kind == "closed":
        return Text(f"· worker closed: {data.get('reason', '')}", style=palette.muted)
    if kind == "spawned":
        return Text(f"· started by {data.get('by', 'person')} on {data.get('driver')}", style=palette.muted)
    details = " ".join(f"{k}={_short(v, 40)}" for k, v in data.items())
    return Text(f"· {kind} {details}".rstrip(), style=palette.muted)


def _reports(text: str, palette: Palette) -> Text:
    """Children's reports, one line each: who, what state, what they said."""
    out = Text()
    for child, title, state, kind, body in _REPORT.findall(text):
        if out:
            out.append("\n")
        tone = palette.warning if kind == "question" else palette.tone(_TONE_OF_STATE.get(state, "muted"))
        out.append(f"↩ {_unescape(title)} [{child}] {state}: ", style=tone + BOLD)
        out.append(body, style=palette.text)
    return out or Text(text, style=palette.text)


class Transcript(RichLog, can_focus=False):
    """The open job's transcript; entries are added once each, in timeline order.

    It never takes the focus: the composer keeps it, and PgUp/PgDn scroll this from there.
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(wrap=True, markup=False, highlight=False, min_width=20, id=id)
        self.last_seq = 0
        self._entries: list[dict[str, Any]] = []
        self._palette: Palette | None = None

    def add(self, entries: list[dict[str, Any]]) -> None:
        """Append the entries newer than what is shown (the log and the stream may overlap)."""
        for entry in entries:
            if entry["seq"] <= self.last_seq:
                continue
            self.last_seq = entry["seq"]
            self._entries.append(entry)
            self._write(entry)

    def restyle(self, palette: Palette) -> None:
        """Draw every entry again in a new theme's colours."""
        self._palette = palette
        self.clear()
        for entry in self._entries:
            self._write(entry)

    def _write(self, entry: dict[str, Any]) -> None:
        if self._palette is None:
            return
        text = entry_text(entry, self._palette)
        if text is not None:
            self.write(text)
