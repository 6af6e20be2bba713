"""What `roost ls` and `roost logs` read and print, at any number of jobs and entries.

Nothing here holds more than it prints: the JSON array of `ls --json` is written page by
page, the human `ls` reads only recent and live jobs, `logs` reads the tail first, and
`logs -f` follows a timeline from the last entry it printed, across the daemon dropping it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from roost.client import LAGGED, Client, ClientError
from roost.models import Row, record_json
from roost.rules.approvals import entry_text as approval_entry_text
from roost.rules.row_text import activity_text, state_marks
from roost.text import safe_text

#: States of work a person should see whatever its age (the human `ls` always lists them).
LIVE_STATES = ["queued", "starting", "working", "waiting", "blocked"]
#: How many of the newest root jobs the human `ls` lists, and how many rows below each.
RECENT_ROOTS = 50
#: How many of the newest archived jobs `ls --archived` lists.
RECENT_ARCHIVED = 200
SUBTREE_ROWS = 100
#: Rows a `list` page asks for (pages also stop at the daemon's byte bound).
LIST_PAGE = 1000
#: Entries a `logs` page may ask for (the protocol's bound).
LOGS_PAGE = 2000
#: What `roost logs JOB` prints by default: the newest entries, this many, in at most this much
#: text (a build's entries are up to 64 KiB: 200 of them would be 13 MB on a terminal).
TAIL_ENTRIES = 200
TAIL_BYTES = 256 * 1024
#: How much of what a job last said (or asks, or why it failed) a line of `ls` shows.
PEEK_WIDTH = 50


def write_json_array(records: Iterable[dict[str, Any]], out: TextIO) -> int:
    """Write one JSON array, one record a line, as the records come; returns how many.

    One line per record keeps json's C encoder (``indent`` would use the pure-Python one, 10x
    slower at 100k records) and lets line tools work on the output. ASCII-only output escapes
    every control character (json leaves DEL and the C1 range raw otherwise) and lone
    surrogates, so job text in it can never act on a terminal, and it stays exact JSON."""
    count = 0
    out.write("[")
    for record in records:
        out.write(",\n" if count else "\n")
        out.write(json.dumps(record))
        count += 1
    out.write("\n]\n" if count else "]\n")
    return count


def full_records(client: Client, archived: bool) -> Iterator[dict[str, Any]]:
    """Every job's full record (what `show` gives), or every archived job's, oldest first, one page
    in memory at a time."""
    for row in client.rows(full=True, archived_only=archived or None, limit=LIST_PAGE):
        yield record_json(row)


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


def tree_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row (``rows`` oldest first), as the app lists them: trees newest first, the
    children indented under their parent in the order they were spawned (a row whose parent is
    not among ``rows`` starts a tree of its own); each with the app's marks, ``● ▸`` (the dot
    says whether its worker is up: ○ closed, a message resumes it)."""
    by_parent: dict[str | None, list[dict[str, Any]]] = {}
    ids = {r["id"] for r in rows}
    for r in rows:
        by_parent.setdefault(r["parent"] if r["parent"] in ids else None, []).append(r)
    lines: list[str] = []
    stack = [(r, 0) for r in by_parent.get(None, [])]  # popped from the end: the newest tree first
    while stack:  # depth-first without recursion: a tree can be deeper than Python's stack
        r, depth = stack.pop()
        row = Row.from_wire(r)
        said = activity_text(row, PEEK_WIDTH)[0]  # why it failed, what it asks, or its last line
        peek = f"  — {safe_text(said)}" if said else ""
        title = safe_text(r["title"]).replace("\n", " ")[:40]  # cut what is shown, on one line
        lines.append(f"{'  ' * depth}{state_marks(row)} {r['id']:<6} {r['state']:<8} {title}{peek}")
        stack.extend((child, depth + 1) for child in reversed(by_parent.get(r["id"], [])))
    return lines


def format_entry(entry: dict[str, Any]) -> str:
    """One timeline entry as a line of text (`roost logs`, and tests)."""
    ts = time.strftime("%H:%M:%S", time.localtime(entry["ts"]))
    data = entry["data"]
    kind = entry["kind"]
    if kind == "reports":
        body = " | ".join(f"{r.get('title') or r.get('child')} [{r.get('child')}] {r.get('state')}: {r.get('text', '')}"
                          for r in data.get("reports", [])) or data.get("text", "")
    elif kind in ("text", "prompt", "message"):
        body = data.get("text", "").removesuffix("\n")  # a command's output keeps its newlines
    elif kind == "tool":
        body = f"{data.get('name')} {json.dumps(data.get('args'))} -> {json.dumps(data.get('result'))}"
    elif kind == "state":
        body = data.get("state", "") + (f" ({data['reason']})" if data.get("reason") else "")
    elif kind == "approval":
        body = approval_entry_text(data)
    else:
        body = " ".join(f"{k}={v}" for k, v in data.items())
    return f"{ts} {kind:<9} {body}"


def log_tail(client: Client, job: str, count: int, budget: int | None = None) -> tuple[list[dict[str, Any]], bool]:
    """The newest ``count`` entries of a job's timeline, oldest first, and whether older exist;
    with a ``budget``, only as many of them as print in that many bytes (the newest always)."""
    newest_first: list[dict[str, Any]] = []
    size, more = 0, False
    for page in client.pages("logs", job=job, limit=min(max(count, 1), LOGS_PAGE)):
        more = bool(page.get("more"))
        for entry in reversed(page["entries"]):
            size += len(format_entry(entry).encode(errors="replace")) + 1  # its line, as printed
            if len(newest_first) >= count or (budget is not None and newest_first and size > budget):
                return newest_first[::-1], True
            newest_first.append(entry)
        if len(newest_first) >= count:
            break
    return newest_first[::-1], more


def log_pages_after(client: Client, job: str, after: int) -> Iterator[dict[str, Any]]:
    """Every entry of a job's timeline after seq ``after``, page by page, oldest first."""
    for page in client.pages("logs", job=job, after=after, limit=LOGS_PAGE):
        yield from page["entries"]


def follow(client: Client, reconnect: Callable[[], Client], job: str, last: int,
           emit: Callable[[dict[str, Any]], None], note: Callable[[str], None]) -> None:
    """Print a job's timeline as it grows, from the entry after seq ``last``, until interrupted.

    Each round catches up page by page, then subscribes after the last seq printed, so no
    entry falls between. When the daemon drops this reader (it fell behind) or the connection
    ends, it connects again and starts a new round; ``reconnect`` raises when no daemon is there."""
    try:
        while True:
            for entry in log_pages_after(client, job, last):
                emit(entry)
                last = entry["seq"]
            result, snapshot = client.subscribe("timeline", job=job, after=last)
            if result.get("skipped"):  # more arrived than a snapshot holds: page them first
                client.call("unsubscribe", sub=result["sub"])
                continue
            try:
                for entry in snapshot:
                    last = _emit_new(entry, last, emit)
                while True:
                    event = client.read_event()
                    if event.get("event") == "timeline" and event["entry"].get("job") == job:
                        last = _emit_new(event["entry"], last, emit)
            except ClientError as exc:
                if exc.code not in (LAGGED, "disconnected"):
                    raise
                note(f"{exc.message}; following again after entry {last}")
                client.close()
                client = reconnect()
    finally:
        client.close()


def _emit_new(entry: dict[str, Any], last: int, emit: Callable[[dict[str, Any]], None]) -> int:
    if entry["seq"] <= last:
        return last
    emit(entry)
    return entry["seq"]
