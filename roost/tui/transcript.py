"""A job's transcript: the newest page of its timeline, older pages on demand, then streamed entries
(drawn a few times a second; while it follows the tail it keeps only the newest, so a command that
prints tens of MB costs the app a screenful or so, not all of it)."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import RichLog

from roost.rules.views import readable_text
from roost.text import safe_text
from roost.tui.looks import BOLD, Palette

#: How long entries that stream in wait to be drawn together, in seconds.
DRAW_EVERY = 0.1
#: How much text the transcript keeps while it follows the tail (and always its newest entry):
#: some 800 lines of a command's flood, whose entries are up to 64 KiB each.
KEEP_BYTES = 64 * 1024
#: Timeline kinds that repeat what another entry already shows.
_SKIPPED = {"turn_end", "report", "pinned", "unpinned"}
#: States worth a line of their own (working follows every prompt, so it would only add noise).
_TONE_OF_STATE = {"waiting": "warning", "blocked": "warning", "failed": "error", "stopped": "muted",
                  "done": "success", "idle": "muted"}


def _text_size(entry: dict[str, Any]) -> int:
    """How much text an entry carries (what a flood of output is made of)."""
    return len(str((entry.get("data") or {}).get("text", "")))


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _safe(value: Any) -> Any:
    """Every string in an entry's data made safe for the terminal and free of report wire text
    (what jobs write is shown)."""
    if isinstance(value, str):
        return safe_text(readable_text(value))
    if isinstance(value, dict):
        return {key: _safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_safe(item) for item in value]
    return value


def entry_text(entry: dict[str, Any], palette: Palette, stamped: bool = False) -> Text | None:
    """How one timeline entry reads in the transcript (after its time, ``stamped``); None for
    entries it leaves out."""
    text = _entry_body(entry["kind"], _safe(entry.get("data") or {}), palette)
    if text is None or not stamped:
        return text
    stamp = Text(time.strftime("%H:%M:%S ", time.localtime(entry.get("ts") or 0)), style=palette.muted)
    return stamp + text


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
        return Text(f"· worker {'resumed' if data.get('resumed') else 'started'} (pid {data.get('pid')})",
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


class Transcript(RichLog, can_focus=False):
    """The open job's transcript, loaded tail first: the newest entries, then older pages when
    the person scrolls to the top, and new entries as they stream in (each shown once).

    It follows the tail until the person scrolls up; then it stays where they read and counts
    the lines that arrived below (``unread``) until they scroll back to the end or ``follow``.
    It never takes the focus: the composer keeps it, and PgUp/PgDn scroll this from there.
    """

    #: Whether new lines scroll into view (the view is at the end).
    following: reactive[bool] = reactive(True)
    #: Lines that arrived below the view while it was not following.
    unread: reactive[int] = reactive(0)
    #: Whether each entry starts with its time.
    stamped: reactive[bool] = reactive(False)

    class Unread(Message):
        """How many lines wait below the view (0: it follows the tail again)."""

        def __init__(self, count: int) -> None:
            super().__init__()
            self.count = count

    class Older(Message):
        """Scrolled to the top with older entries left to read: the screen fetches those
        before ``before`` and hands them to ``prepend``."""

        def __init__(self, before: int) -> None:
            super().__init__()
            self.before = before

    def __init__(self, id: str | None = None) -> None:
        super().__init__(wrap=True, markup=False, highlight=False, min_width=20, id=id)
        self.last_seq = 0
        #: Whether entries older than the first one shown exist, and one page of them is asked for.
        self.more_before = False
        self._asking = False
        self._entries: list[dict[str, Any]] = []
        #: Message entries shown as queued (by seq), until a prompt delivers them.
        self._waiting: dict[int, dict[str, Any]] = {}
        self._palette: Palette | None = None
        #: Entries added and not drawn yet, and the timer that draws them.
        self._undrawn: list[dict[str, Any]] = []
        self._draw_timer: Timer | None = None

    def start(self, entries: list[dict[str, Any]], more: bool) -> None:
        """Show the newest page of the timeline; ``more`` says older entries exist."""
        self._entries, self.last_seq, self.more_before = [], 0, more
        self._undrawn.clear()
        self._waiting.clear()
        self.clear()
        self.following = True
        self.add(entries)

    def add(self, entries: list[dict[str, Any]]) -> None:
        """Append the entries newer than what is shown (the log and the stream may overlap); they
        are drawn together DRAW_EVERY later, so a flood of output is drawn a few times a second."""
        fresh = [entry for entry in entries if entry["seq"] > self.last_seq]
        if not fresh:
            return
        self.last_seq = fresh[-1]["seq"]
        self._entries.extend(fresh)
        self._undrawn.extend(fresh)
        if self._draw_timer is None:
            self._draw_timer = self.set_timer(DRAW_EVERY, self._draw_new)

    def _draw_new(self) -> None:
        """Draw what came since the last time. While it follows the tail, only the newest
        KEEP_BYTES of text stay (older entries are a page away: scrolling to the top asks for
        them), so a command that prints 40 MB costs the app that, not 40 MB of lines. A message
        shown as queued leaves once the prompt that delivers it arrives."""
        self._draw_timer = None
        fresh, self._undrawn = self._undrawn, []
        if self.following and self._trim():
            self._redraw(keep_bottom=False)
        elif any(self._delivered(entry) for entry in self._waiting.values()):
            self._redraw(keep_bottom=not self.following)
        else:
            for entry in fresh:
                self._write(entry)

    def _trim(self) -> bool:
        """Drop the oldest entries past KEEP_BYTES of text (the newest always stays); whether any went."""
        first = len(self._entries) - 1
        size = _text_size(self._entries[first]) if self._entries else 0
        while first > 0 and size + _text_size(self._entries[first - 1]) <= KEEP_BYTES:
            first -= 1
            size += _text_size(self._entries[first])
        if first <= 0:
            return False
        del self._entries[:first]
        self.more_before = True
        return True

    def _delivered(self, message: dict[str, Any]) -> bool:
        """Whether a later prompt carries this message's text (several may go in one prompt)."""
        text = (message.get("data") or {}).get("text", "")
        for entry in reversed(self._entries):
            if entry["seq"] <= message["seq"]:
                return False
            if entry["kind"] == "prompt" and text in (entry.get("data") or {}).get("text", ""):
                return True
        return False

    def prepend(self, entries: list[dict[str, Any]], more: bool) -> None:
        """Put an older page above what is shown, keeping the lines in view where they were."""
        first = self._entries[0]["seq"] if self._entries else self.last_seq + 1
        self._entries[:0] = [entry for entry in entries if entry["seq"] < first]
        self.more_before, self._asking = more, False
        self._redraw(keep_bottom=True)

    def want_older(self) -> None:
        """Ask for the page before the first entry shown, once at a time, if there is one."""
        if self.more_before and not self._asking and self._entries:
            self._asking = True
            self.post_message(self.Older(self._entries[0]["seq"]))

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new <= 0 < old:
            self.want_older()
        if new < old and new < self.max_scroll_y:
            self.following = False  # the person scrolled up: stay here
        elif new >= self.max_scroll_y:
            self.following = True

    def watch_following(self, following: bool) -> None:
        self.auto_scroll = following
        if following:
            self.unread = 0
        self.post_message(self.Unread(self.unread))

    def watch_unread(self, count: int) -> None:
        self.post_message(self.Unread(count))

    def watch_stamped(self) -> None:
        self._redraw(keep_bottom=not self.following)

    def follow(self) -> None:
        """Back to the tail, and follow it again (End)."""
        self.following = True
        self.scroll_end(animate=False, immediate=True)

    def restyle(self, palette: Palette) -> None:
        """Draw every entry again in a new theme's colours."""
        self._palette = palette
        self._redraw(keep_bottom=False)

    def _redraw(self, keep_bottom: bool) -> None:
        below, following = len(self.lines) - self.scroll_y, self.following
        self._undrawn.clear()  # every entry is drawn here
        self.clear()
        self._waiting.clear()
        for entry in self._entries:
            self._write(entry, scroll_end=not keep_bottom)
        if keep_bottom:  # the same lines stay at the bottom of the view
            self.scroll_to(y=max(len(self.lines) - below, 0), animate=False, immediate=True)
        self.following = following

    def _write(self, entry: dict[str, Any], scroll_end: bool | None = None) -> None:
        if self._palette is None:
            return
        if entry["kind"] == "message":
            if self._delivered(entry):
                return
            self._waiting[entry["seq"]] = entry
        text = entry_text(entry, self._palette, self.stamped)
        if text is None:
            return
        before = len(self.lines)
        self.write(text, scroll_end=scroll_end)
        if scroll_end is None and not self.following:
            self.unread += len(self.lines) - before
