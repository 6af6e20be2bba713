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


# -- an agent's words for what went wrong -------------------------------------------------------------
#: The most characters of an agent's error text read (its end: what it said last), and kept.
WORDS_SCAN = 64 * 1024
WORDS_MAX = 500
#: Terminal control sequences: CSI (``ESC [ … final``, and the 8-bit CSI), OSC (``ESC ] … BEL`` or
#: ``ESC \\``), other two-byte escapes, and their caret-notation shadows (``^[[2m``: an escape that was
#: made visible before it reached roost).
_SEQUENCES = re.compile(r"(?:\x1b|\^\[)\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]"
                        r"|(?:\x1b|\^\[)\][^\x07\x1b]*(?:\x07|\x1b\\|$)|\x9d[^\x07\x1b]*(?:\x07|\x1b\\|$)"
                        r"|\x1b[@-_]?")
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
#: Words that mark the line of a failure that says what went wrong.
_FAILURE = re.compile(r"error|fail|fatal|panic|denied|refused|not found|unable|cannot|could not|invalid|"
                      r"exception|traceback|limit|timed out|timeout", re.I)


def plain_words(text: str, limit: int = WORDS_MAX) -> str:
    """``text`` as plain words: terminal control sequences and every other control character but the
    newline gone, spaces squeezed, at most ``limit`` characters (its end, when longer: an agent says
    last what went wrong). Only the last WORDS_SCAN characters are read, so any input costs the same."""
    text = _CONTROLS.sub("", _SEQUENCES.sub("", text[-WORDS_SCAN:].replace("\r\n", "\n").replace("\t", " ")))
    lines = [" ".join(line.split()) for line in text.split("\n")]
    text = "\n".join(line for line in lines if line)
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def failure_line(text: str, noise: tuple[str, ...] = (), limit: int = WORDS_MAX) -> str:
    """The one line of an agent's error text that says what went wrong, as plain words: the last line
    with a failure word in it, else its last line; lines that start with one of ``noise`` (what an
    agent prints at every start, whatever happens after) are never it. Empty when nothing is left."""
    lines = [line for line in plain_words(text, WORDS_SCAN).split("\n") if line and not line.startswith(noise)]
    line = next((line for line in reversed(lines) if _FAILURE.search(line)), lines[-1] if lines else "")
    return line if len(line) <= limit else line[:limit - 1] + "…"
