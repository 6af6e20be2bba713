"""`roost logs`: a job's timeline, the tail first (bounded in entries and in text), every entry
with --all, and -f following it as it grows, across the daemon dropping this reader."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import click

from roost.cli.common import Ctx, errors, pass_ctx, say
from roost.client import LAGGED, Client, ClientError, connect
from roost.rules.approvals import entry_text as approval_entry_text

#: Entries a `logs` page may ask for (the protocol's bound).
LOGS_PAGE = 2000
#: What `roost logs JOB` prints by default: the newest entries, this many, in at most this much
#: text (a build's entries are up to 64 KiB: 200 of them would be 13 MB on a terminal).
TAIL_ENTRIES = 200
TAIL_BYTES = 256 * 1024


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


def follow_timeline(client: Client, reconnect: Callable[[], Client], job: str, last: int,
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


@click.command()
@click.argument("job_id")
@click.option("-n", "--lines", "count", type=click.IntRange(min=1), default=None,
              help="How many of the newest entries, whatever their size  [default: 200, up to 256 KiB]")


@click.option("--all", "everything", is_flag=True, help="Every entry, from the first.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new entries.")
@pass_ctx
def logs(ctx: Ctx, job_id: str, count: int | None, everything: bool, follow: bool) -> None:
    """Print a job's timeline and transcript: the newest entries (200, in at most 256 KiB of
    text: a build's output comes in entries of up to 64 KiB), -n of them, or --all of them."""
    def emit(entry: dict[str, Any]) -> None:
        say(format_entry(entry))

    with ctx.client() as client, errors():
        last = 0
        if everything:
            for entry in log_pages_after(client, job_id, 0):
                emit(entry)
                last = entry["seq"]
        else:
            bounded = count is None  # the default page is bounded in text too; -n N is what was asked
            entries, more = log_tail(client, job_id, count or TAIL_ENTRIES,
                                               TAIL_BYTES if bounded else None)
            if more and not follow:
                say(f"roost: the newest {len(entries)} entries"
                    + (f", up to {TAIL_BYTES // 1024} KiB" if bounded else "")
                    + f"; roost logs -n N {job_id} prints N, roost logs --all {job_id} every one", err=True)
            for entry in entries:
                emit(entry)
            last = entries[-1]["seq"] if entries else 0
        if follow:
            follow_timeline(client, lambda: connect(autostart=False), job_id, last, emit,
                            lambda text: say(f"roost: {text}", err=True))
