"""Esc is Esc: Esc followed at once by a key is Esc, then that key — never a meta key.

A terminal sends Esc as the byte ESC, and a meta (Alt) key as ESC and the key. Textual 8.2 reads
ESC followed by a character within its escape delay (``ESCDELAY``, 100 ms) as ``alt+`` that key,
and when another escape sequence follows in the same read (``Escape g Down``), as ``^`` then the
key: ``g`` stayed in the composer of the screen Esc should have left, and ``^g`` was sent to the
job. No delay tells a fast typist's or a script's Esc-then-key from a meta key, and roost binds no
meta key, so it reads them all as Esc then the key, in two places (docs/keys.md, "Esc"):

- ``EscapeFirstParser`` splits ESC and a plain character in what one read brings, before Textual's
  parser sees them, so the character is read on its own;
- ``split_meta`` turns an ``alt+`` key (ESC and the key came in two reads within the delay) into
  the two keys, for the key router.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual import events
from textual._xterm_parser import XTermParser
from textual.drivers import linux_driver
from textual.message import Message

ESC = "\x1b"
#: What the terminal wraps a paste in: ESC inside a paste is the pasted text's, left alone.
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
#: Characters that start an escape sequence after ESC (CSI, SS3, OSC, DCS, APC, PM, SOS, ST):
#: ESC before them is no Esc key.
_INTRODUCERS = frozenset("[O]P_^X\\")


def _key_after_esc(character: str) -> bool:
    """Whether ESC then ``character`` is Esc then a key (not the start of an escape sequence)."""
    return character.isprintable() and character not in _INTRODUCERS


class EscapeFirstParser(XTermParser):
    """Textual's terminal parser, but ESC followed by a plain character in the same read is the
    Esc key, then the character parsed on its own."""

    def __init__(self, debug: bool = False) -> None:
        super().__init__(debug)
        self._pasting = False

    def feed(self, data: str) -> Iterable[Message]:
        if not data:  # the end of input
            yield from super().feed(data)
            return
        start = index = 0
        while (index := data.find(ESC, index)) != -1:
            if data.startswith(PASTE_START, index):
                self._pasting = True
            elif data.startswith(PASTE_END, index):
                self._pasting = False
            elif not self._pasting and index + 1 < len(data) and _key_after_esc(data[index + 1]):
                if index > start:
                    yield from super().feed(data[start:index])
                yield events.Key("escape", ESC)
                start = index + 1
            index += 1
        if start < len(data):
            yield from super().feed(data[start:])


def use_escape_first_parser() -> None:
    """Make the terminal driver read keys with EscapeFirstParser (before the app runs)."""
    linux_driver.XTermParser = EscapeFirstParser  # type: ignore[misc]


def split_meta(event: events.Key) -> tuple[events.Key, events.Key] | None:
    """An ``alt+`` key as Esc and the key it was made with; None for any other key."""
    if not event.key.startswith("alt+") or not event.character or len(event.character) != 1:
        return None
    character = event.character
    name = event.key.removeprefix("alt+").removeprefix("shift+")
    key = character if len(name) == 1 else name
    return events.Key("escape", ESC), events.Key(key, character)
