"""Output that is not text a person reads: mostly control characters or bytes that are not UTF-8
(a binary file sent to stdout, a flood of NUL). JSON keeps each such character as six bytes, so the
timeline keeps a count of it instead ("4194304 bytes of binary output"; docs/reliability.md#quotas).
Pure, and shipped to hosts: a command worker judges its own output (roost/programs/turn_output.py),
the daemon an agent's text (roost/daemon/engine/turns.py).
"""

from __future__ import annotations

import re

#: A text shorter than this is never taken for binary (a colour code or a cursor move on its own).
BINARY_JUDGED = 256
#: The share of characters that are control characters (or U+FFFD, a byte that was not UTF-8)
#: past which a text is binary. Coloured output (an ESC every few characters) stays well under it.
BINARY_SHARE = 0.25
#: A character that is not text: a control but tab, newline and CR, DEL, C1, or a replaced byte.
_NOT_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")


def binary(text: str) -> bool:
    """Whether ``text`` is output no person reads as text: at least BINARY_JUDGED characters, more
    than BINARY_SHARE of them control characters or replaced bytes."""
    if len(text) < BINARY_JUDGED or (text.isprintable() and "\ufffd" not in text):
        return False
    controls = len(text) - len(_NOT_TEXT.sub("", text))
    return controls > BINARY_SHARE * len(text)


def text_ends(text: str) -> tuple[str, str]:
    """The text before the first character that is not text, and after the last one."""
    first = _NOT_TEXT.search(text)
    if first is None:
        return text, ""
    last = _NOT_TEXT.search(text[::-1])
    assert last is not None
    return text[:first.start()], text[len(text) - last.start():]


def binary_words(size: int) -> str:
    """What the timeline says in place of ``size`` bytes of binary output."""
    return f"{size} bytes of binary output (not kept: mostly control characters or bytes that are not UTF-8)"
