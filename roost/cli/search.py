"""What `roost search` prints: one line per matching timeline entry (job, time, kind, title and the
matching text with its matches marked), and where the next page starts."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable

import click

from roost.cli.common import Ctx, errors, pass_ctx, say
from roost.protocol import SEARCH_LIMIT_MAX
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


@click.command()
@click.argument("words", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="The page as JSON (results, next, indexing).")
@click.option("--archived", is_flag=True, help="Search archived jobs' timelines too.")
@click.option("--under", metavar="ID", help="Only this job and the jobs below it.")
@click.option("-n", "--limit", type=click.IntRange(1, SEARCH_LIMIT_MAX), default=20, show_default=True,
              help="Results on the page.")


@click.option("--before", type=click.IntRange(0), help="The page that starts below this entry (the last page's next).")
@pass_ctx
def search(ctx: Ctx, words: tuple[str, ...], as_json: bool, archived: bool, under: str | None, limit: int,
           before: int | None) -> None:
    """Search every job's timeline for entries holding all the WORDS (a word ending in * is a
    prefix), newest first, one page at a time."""
    text = " ".join(words)
    with ctx.client() as client, errors():
        page = client.search(text, under=under, archived=archived, limit=limit, before=before)
        if as_json:
            click.echo(json.dumps(page))
        else:
            show(page, text, sys.stdout.isatty(), lambda line: say(line, err=True))


@click.command()
@click.argument("job_id")
@click.option("--worktree", is_flag=True, help="A new worktree holding the job's uncommitted changes.")
@click.option("--title", help="The fork's title (default: fork of TITLE).")
@click.argument("prompt", required=False)
@pass_ctx
def fork(ctx: Ctx, job_id: str, worktree: bool, title: str | None, prompt: str | None) -> None:
    """Make a new job that goes on from JOB_ID's conversation so far (the job itself is untouched)
    and print its id; with PROMPT it starts on it, else it waits for a message."""
    with ctx.client() as client, errors():
        row = client.fork(job_id, worktree=worktree, title=title, prompt=prompt)
    say(row["id"])
