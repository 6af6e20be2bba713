"""Text from jobs, made safe to show on a terminal: it is shown, it never acts.

Titles, prompts, agents' texts and reasons come from anyone who can start a job or write its
output. A terminal obeys control characters in what it prints: ``ESC ] 0 ; … BEL`` retitles the
window, CSI sequences move the cursor, clear the screen or rewrite lines already shown, ``\\r``
overwrites a line. Every place that prints job text (the CLI, the app) passes it through
``safe_text`` first.
"""

from __future__ import annotations

import re

#: C0 controls but newline and tab, DEL, C1 controls (U+0080-U+009F: 8-bit CSI, OSC …), and lone
#: surrogates (JSON can carry them; no terminal encoding can print them).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20 or code == 0x7F:
        return "^" + chr(code ^ 0x40)  # caret notation, as `cat -v` shows it: ESC is ^[, BEL ^G
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe_text(s: str) -> str:
    """``s`` with every control character but newline and tab made visible (``^[`` for ESC,
    ``^G`` for BEL, ``\\x9b`` for the 8-bit CSI), so an escape sequence in it is shown as text
    and can never act on the terminal. It runs on every row shown and every page of a diff, so
    printable text (most titles and peeks; lines of text once their newlines and tabs are set
    aside) is let through by ``isprintable``, a C loop, before any regex runs."""
    if s.isprintable() or s.replace("\n", "").replace("\t", "").isprintable():
        return s
    return _UNSAFE.sub(_visible, s)
