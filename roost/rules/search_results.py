"""What a search result shows in the app: its snippet on one line with the daemon's match spans
kept, and how long ago the entry was written. Pure: the search screen draws what these return."""

from __future__ import annotations

from typing import Any

from roost.rules.row_text import format_age

#: The most characters of a snippet a row shows (the daemon's are at most 400).
SNIPPET_SHOWN = 400
#: The most characters of context a row keeps before its first match, so the match is in view
#: in a narrow column too (what went is an ellipsis).
LEAD_CHARS = 10


def one_line(result: dict[str, Any]) -> tuple[str, list[tuple[int, int]]]:
    """The result's snippet with line breaks and tabs as spaces (same length, so the spans still
    fit), cut to SNIPPET_SHOWN, and the match spans that fall inside it (cut at its end). Text more
    than LEAD_CHARS before the first match gives way to "…", so the match is seen first."""
    text = str(result.get("text", ""))[:SNIPPET_SHOWN]
    flat = text.translate({ord("\n"): " ", ord("\r"): " ", ord("\t"): " "})
    spans: list[tuple[int, int]] = []
    for mark in result.get("marks") or ():
        if not (isinstance(mark, (list, tuple)) and len(mark) == 2 and all(isinstance(i, int) for i in mark)):
            continue
        start, end = max(0, mark[0]), min(len(flat), mark[1])
        if start < end:
            spans.append((start, end))
    spans.sort()
    cut = spans[0][0] - LEAD_CHARS if spans else 0
    if cut > 1:
        flat = "…" + flat[cut:]
        spans = [(start - cut + 1, end - cut + 1) for start, end in spans]
    return flat, spans


def when(result: dict[str, Any], now: float) -> str:
    """How long ago the entry was written ("5m")."""
    try:
        return format_age(now - float(result.get("ts") or 0))
    except (TypeError, ValueError):
        return "?"
