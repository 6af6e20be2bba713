"""What `roost search` prints: one line per matching timeline entry (job, time, kind, title and the
matching text with its matches marked), and where the next page starts."""

from __future__ import annotations

import time
from typing import Any, Callable

import click

from roost.text import safe_text


def result_line(result: dict[str, Any], styled: bool) -> str:
    """One search result as a line; the daemon's spans of the match in bold on a terminal, between
    ``[`` and ``]`` otherwise. Every piece is made safe before it is styled."""
    text = str(result.get("text", ""))
    pieces: list[str] = []
    at = 0
    for start, end in result.get("marks") or ():
        pieces.append(safe_text(text[at:start]))
        match = safe_text(text[start:end])
        pieces.append(click.style(match, bold=True, underline=True) if styled else f"[{match}]")
        at = end
    pieces.append(safe_text(text[at:]))
    body = "".join(pieces).replace("\n", " ")
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(result["ts"])))
    return f"{result['job']}  {stamp}  {result['kind']:<7} {safe_text(str(result.get('title', '')))}: {body}"


def show(page: dict[str, Any], words: str, styled: bool, say: Callable[[str], None]) -> None:
    """Print a page of results (their pieces made safe already), then with ``say`` on stderr how to
    ask for the next one and whether old entries are still being indexed (a search may miss some)."""
    for result in page["results"]:
        click.echo(result_line(result, styled))
    if not page["results"]:
        say(f"roost: nothing matches {words!r}")
    if page.get("indexing"):
        say("roost: old entries are still being indexed for search; some may be missing yet")
    if page.get("next") is not None:
        say(f"roost: more: roost search --before {page['next']} -- {words}")
