"""`roost ls` and `roost show`: what they read and print, at any number of jobs.

Nothing here holds more than it prints: the JSON array of `ls --json` is written page by
page and the human `ls` reads only recent and live jobs. `ls --json` needs no rules: the
lines of the human `ls` (cli/tree.py) are imported only to print them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

import click

from roost.cli.common import Ctx, errors, pass_ctx, say
from roost.client import Client
from roost.models import record_json

#: States of work a person should see whatever its age (the human `ls` always lists them).
LIVE_STATES = ["queued", "starting", "working", "waiting", "blocked"]
#: How many of the newest root jobs the human `ls` lists, and how many rows below each.
RECENT_ROOTS = 50
#: How many of the newest archived jobs `ls --archived` lists.
RECENT_ARCHIVED = 200
SUBTREE_ROWS = 100
#: Rows a `list` page asks for (pages also stop at the daemon's byte bound).
LIST_PAGE = 1000


def write_json_array(pages: Iterable[list[str]], out: TextIO) -> int:
    """Write one JSON array, one record a line, a page of lines at a time; returns how many.

    The lines are the daemon's (``list`` with ``lines``: each record's ``record_json``, encoded
    once there as ASCII-only JSON, which escapes every control character and lone surrogate, so
    job text in it can never act on a terminal). One line per record lets line tools work on
    the output, and writing each page as it comes keeps one page in memory (one write a page:
    a write a line was half the CLI's time for 110k records)."""
    count = 0
    out.write("[")
    for lines in pages:
        if lines:
            out.write((",\n" if count else "\n") + ",\n".join(lines))
            count += len(lines)
    out.write("\n]\n" if count else "]\n")
    return count


def full_records(client: Client, archived: bool) -> Iterator[list[str]]:
    """Every job's full record (what `show` gives) as its JSON line, or every archived job's,
    oldest first, a page of lines at a time (one page in memory)."""
    for page in client.pages("list", lines=True, archived_only=archived or None, limit=LIST_PAGE):
        yield page["lines"]


def recent_rows(client: Client) -> tuple[list[dict[str, Any]], int]:
    """What the human `ls` lists: the newest root jobs with the rows below them, and every job
    that still works or needs someone; returns (rows oldest first, how many jobs are left out)."""
    newest = client.call("list", roots=True, newest_first=True, limit=RECENT_ROOTS)
    rows = {r["id"]: r for r in newest["rows"]}
    for row in client.rows(states=LIVE_STATES, limit=LIST_PAGE):
        rows.setdefault(row["id"], row)
    for root in [r for r in rows.values() if r.get("descendants") and r["parent"] is None]:
        below = client.call("list", under=root["id"], limit=SUBTREE_ROWS)
        for row in below["rows"]:
            rows.setdefault(row["id"], row)
    total = client.call("list", limit=1)["total"]
    ordered = _oldest_first(rows.values())
    return ordered, max(total - len(ordered), 0)


def archived_rows(client: Client) -> tuple[list[dict[str, Any]], int]:
    """What `ls --archived` lists: the newest archived jobs (a tree archived together prints as
    one); returns (rows oldest first, how many archived jobs are left out)."""
    page = client.call("list", archived_only=True, newest_first=True, limit=RECENT_ARCHIVED)
    return _oldest_first(page["rows"]), max(page["total"] - len(page["rows"]), 0)


def _oldest_first(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["created_at"], r["id"]))


def every_row(client: Client, archived: bool) -> list[dict[str, Any]]:
    """Every job's slim row (``ls --all``), or every archived job's, oldest first."""
    return list(client.rows(archived_only=archived or None, limit=LIST_PAGE))


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@pass_ctx
def show(ctx: Ctx, job_id: str, as_json: bool) -> None:
    """Show one job's record."""
    row = record_json(ctx.call("show", job=job_id))
    if as_json:
        click.echo(json.dumps(row, indent=2))
        return
    width = max(len(k) for k in row)
    for key, value in row.items():
        say(f"{key:<{width}}  {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    if row.get("approvals"):
        from roost.cli.approvals import lines

        say("waits for a person to approve (roost approve ID / roost deny ID [REASON]):")
        for line in lines({**a, "job": row["id"]} for a in row["approvals"]):
            say(f"  {line}")


@click.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Every job's full record, as one JSON array.")
@click.option("--all", "everything", is_flag=True, help="Every job, not only live work and recent jobs.")
@click.option("--archived", is_flag=True, help="Only archived jobs (roost unarchive ID brings one back).")
@pass_ctx
def ls(ctx: Ctx, as_json: bool, everything: bool, archived: bool) -> None:
    """List live work and the newest jobs, children indented under their parent."""
    with ctx.client() as client, errors():  # a reader that leaves (`ls --json | head`) ends it quietly
        if as_json:
            write_json_array(full_records(client, archived), sys.stdout)
        elif everything:
            _print_tree(every_row(client, archived), 0, archived)
        else:
            _print_tree(*(archived_rows(client) if archived else recent_rows(client)), archived)


def _print_tree(rows: list[dict[str, Any]], left_out: int, archived: bool) -> None:
    from roost.cli.tree import tree_lines  # the rules' marks and peeks: `ls --json` needs none

    if not rows:
        say("nothing is archived" if archived else "no jobs yet: try  roost spawn 'say hello'")
    for line in tree_lines(rows):
        say(line)
    if left_out:
        say(f"… {left_out:,} more; roost ls --all" + (" --archived" if archived else ""))
