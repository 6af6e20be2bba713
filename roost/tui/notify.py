"""Telling the person outside the app (config ``notify`` / ``notify_via``): the terminal bell,
or a desktop notification the terminal shows (OSC 9, OSC 777), passed through tmux."""

from __future__ import annotations

from roost.models import Row

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
