"""Telling the person outside the app (config ``notify`` / ``notify_via`` / ``notify_interval``):
the terminal bell, or a desktop notification the terminal shows (OSC 9, OSC 777), passed through
tmux, so it reaches the person inside tmux and over SSH. Only while the terminal says the app does
not have the focus (where it says: focus reporting, which Textual turns on), and at most one per
``notify_interval`` seconds (roost/rules/attention.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from roost.models import Row
from roost.rules.attention import may_notify

#: What each kind of notification says after the job's title.
_WORDS = {"needs_input": "needs you", "failed": "failed", "done": "is done"}


def notification_text(what: str, row: Row) -> str:
    """``fix the parser [r7kp] failed: exit 2``: what a desktop notification says."""
    text = f"{row.job.title} [{row.id}] {_WORDS[what]}"
    if what == "failed" and row.job.reason:
        text += f": {row.job.reason}"
    return " ".join(text.replace(";", ",").split())  # one line; ';' separates OSC 777's fields


def osc_sequence(via: str, text: str, in_tmux: bool) -> str:
    """The escape sequence that asks the terminal to show ``text`` (``via`` osc9 or osc777);
    inside tmux it is wrapped in tmux's passthrough, which hands it to the outer terminal."""
    body = f"\x1b]9;{text}\x07" if via == "osc9" else f"\x1b]777;notify;roost;{text}\x07"
    if in_tmux:
        return "\x1bPtmux;" + body.replace("\x1b", "\x1b\x1b") + "\x1b\\"
    return body


class Notifier:
    """Sends what ``newly_notable`` found as one notification per batch, when the rules let it.

    ``focused`` is what the terminal last said (None until it says anything)."""

    def __init__(self, via: Sequence[str], interval: float, clock: Callable[[], float],
                 write: Callable[[str], None], bell: Callable[[], None], in_tmux: bool) -> None:
        self._via = tuple(via)
        self._interval = interval
        self._clock = clock
        self._write = write
        self._bell = bell
        self._in_tmux = in_tmux
        self._last: float | None = None
        self.focused: bool | None = None

    def tell(self, news: Sequence[tuple[str, Row]]) -> bool:
        """Send one notification for ``news`` (the first, and how many more); False when none went."""
        now = self._clock()
        if not news or not self._via or not may_notify(self.focused, self._last, now, self._interval):
            return False
        self._last = now
        text = notification_text(*news[0]) + (f" (and {len(news) - 1} more)" if len(news) > 1 else "")
        for via in self._via:
            if via != "bell":
                self._write(osc_sequence(via, text, self._in_tmux))
        if "bell" in self._via:
            self._bell()
        return True
