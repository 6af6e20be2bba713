"""Text from jobs made safe to put on a terminal (a stand-in until H6's version lands on main)."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)  # ESC shows as ^[, BEL as ^G
    if code == 0x7F:
        return "^?"
    return f"\\x{code:02x}"  # C1 controls (CSI 0x9b and friends)


def safe_text(s: str) -> str:
    """``s`` with every control character but newline and tab shown as a visible escape, so
    what a job printed can never move the cursor, retitle the window or ring the bell."""
    return _CONTROL.sub(_visible, s)
